"""PyTorch's side of `make bench-kernels`: reads the case list printed by
`bench_kernels --list` on stdin and prints, for each, the same lines as the C
benchmark ("name op gflops seconds"), timed with PyTorch CPU at the given
thread count. Run with Debian's python3 (python3-torch)."""
import sys
import time

import torch

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
torch.set_num_threads(threads)
torch.manual_seed(0)


def median_time(fn):
    fn()  # warm up
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2]


def report(name, op, flops, fn):
    t = median_time(fn)
    print(f"{name} {op} {flops / t / 1e9:.2f} {t:.6f}", flush=True)


for line in sys.stdin:
    f = line.split()
    if not f:
        continue
    name, kind = f[0], f[1]
    if kind == "conv":
        n, c, h, k, r, stride, pad = map(int, f[2:])
        x = torch.randn(n, c, h, h)
        w = torch.randn(k, c, r, r)
        y = torch.nn.functional.conv2d(x, w, None, stride, pad)
        p, q = y.shape[2], y.shape[3]
        flops = 2.0 * n * k * p * q * c * r * r
        dy = torch.randn_like(y)
        conv = lambda: torch.nn.functional.conv2d(x, w, None, stride, pad)

        def bwd(mask):
            return lambda: torch.ops.aten.convolution_backward(
                dy, x, w, None, [stride, stride], [pad, pad], [1, 1], False,
                [0, 0], 1, mask)

        with torch.no_grad():
            report(name, "fwd", flops, conv)
            report(name, "dx", flops, bwd([True, False, False]))
            report(name, "dw", flops, bwd([False, True, False]))
    elif kind == "gemm":
        m, n, k = map(int, f[2:])
        x = torch.randn(m, k)
        w = torch.randn(n, k)
        dy = torch.randn(m, n)
        flops = 2.0 * m * n * k
        with torch.no_grad():
            report(name, "fwd", flops, lambda: torch.nn.functional.linear(x, w))
            report(name, "dx", flops, lambda: torch.mm(dy, w))
            report(name, "dw", flops, lambda: torch.mm(dy.t(), x))
