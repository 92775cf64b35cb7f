"""PyTorch's side of `make bench-cuda`: delta's two GPU jobs on the same GPU
in the same precision (fp32, TF32 off for matmuls and cuDNN: delta's cuBLAS
calls run in plain fp32), on random data, timed with CUDA synchronization
over `steps` steps after warm-up:
  resnet50 BATCH   torchvision ResNet-50, 3x224x224, 1000 classes, SGD
                   (momentum 0.9)
  gpt2 BATCH T     GPT-2 small (12 layers, 768 wide, 12 heads, vocab 50257,
                   dropout 0.1; the model of scripts/bench_train_torch.py,
                   attention written out as delta's), AdamW
--precision bf16: the forward (and the loss) under
torch.autocast("cuda", dtype=torch.bfloat16), as delta's --precision bf16.
Prints "step_s X" and "peak_bytes Y" (torch.cuda.max_memory_allocated).
Usage: bench_cuda_torch.py resnet50|gpt2 BATCH [T] [STEPS] [--precision fp32|bf16]"""
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_train_torch import GPT  # noqa: E402

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = True
dev = torch.device("cuda")
torch.manual_seed(0)
PRECISION = "fp32"


def autocast():
    return torch.autocast("cuda", dtype=torch.bfloat16,
                          enabled=PRECISION == "bf16")


def timed(step, n):
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n


def resnet50(batch):
    import torchvision
    m = torchvision.models.resnet50(num_classes=1000).to(dev).train()
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(batch, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (batch,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
    return step


def gpt2(batch, t):
    v = 50257
    m = GPT(layers=12, c=768, nh=12, t=1024, v=v, p=0.1).to(dev).train()
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4, weight_decay=0.01)
    x = torch.randint(0, v, (batch, t), device=dev)
    y = torch.randint(0, v, (batch, t), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = F.cross_entropy(m(x).view(-1, v), y.view(-1))
        loss.backward()
        opt.step()
    return step


if __name__ == "__main__":
    if "--precision" in sys.argv:
        i = sys.argv.index("--precision")
        PRECISION = sys.argv[i + 1] if i + 1 < len(sys.argv) else ""
        del sys.argv[i:i + 2]
    if PRECISION not in ("fp32", "bf16"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    if len(sys.argv) < 3 or sys.argv[1] not in ("resnet50", "gpt2"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    if not torch.cuda.is_available():
        print("bench_cuda_torch: no CUDA device for PyTorch", file=sys.stderr)
        sys.exit(1)
    batch = int(sys.argv[2])
    if sys.argv[1] == "resnet50":
        steps = int(sys.argv[3]) if len(sys.argv) > 3 else 10
        step = resnet50(batch)
    else:
        t = int(sys.argv[3]) if len(sys.argv) > 3 else 1024
        steps = int(sys.argv[4]) if len(sys.argv) > 4 else 10
        step = gpt2(batch, t)
    torch.cuda.reset_peak_memory_stats()
    s = timed(step, steps)
    print(f"step_s {s:.6f}")
    print(f"peak_bytes {torch.cuda.max_memory_allocated()}")
    print(f"device {torch.cuda.get_device_name(0)}")
