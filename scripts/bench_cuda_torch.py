"""PyTorch's side of `make bench-cuda`: delta's two GPU jobs on the same GPU
in the same precision (fp32, TF32 off for matmuls and cuDNN: delta's cuBLAS
calls run in plain fp32), on random data, in one of three modes:
  eager        the model as it is (what `step_s`/`peak_bytes` always were);
  checkpoint   torch.utils.checkpoint around each block (ResNet-50: each
               bottleneck block; GPT-2: each transformer block),
               use_reentrant=False: the blocks' activations are recomputed in
               backward, their inputs kept;
  compile      torch.compile of the model and its loss, with
               torch._functorch.config.activation_memory_budget = --amb: the
               fraction of the activations AOTAutograd's min-cut partitioner
               saves compared with its own default plan (1.0: its default, the
               fastest; 0.0: recompute the whole compiled region). PyTorch 2.4+.
The jobs:
  resnet50 BATCH   torchvision ResNet-50, 3x224x224, 1000 classes, SGD
                   (momentum 0.9)
  gpt2 BATCH T     GPT-2 small (12 layers, 768 wide, 12 heads, vocab 50257,
                   dropout 0.1; the model of scripts/bench_train_torch.py,
                   attention written out as delta's), AdamW
--image-size, --classes, --layers, --width, --heads, --vocab shrink them for
a smoke run on the cpu (--device cpu).

One configuration per process (scripts/bench_cuda_peers.py runs a sweep of
them, each in its own). The first step (compilation, cuDNN's autotuning) and
two more are warm-up; then STEPS steps are timed with CUDA events, one per
step, and the peak is torch.cuda.max_memory_allocated() over them after
reset_peak_memory_stats(). Prints
  step_s X        the median timed step (as delta's cells: a median)
  peak_bytes Y    the peak over the timed steps
  first_step_s Z  the first step, wall time (compile mode: compile_s Z, the
                  compilation of forward and backward and that first step)
  device NAME
or "failed: REASON" and exits 1. On the cpu there are no allocator
statistics: peak_bytes is the process's resident-set high-water mark over
the timed steps (VmHWM, reset through /proc/self/clear_refs), a rough proxy.
--precision bf16: the forward (and the loss) under torch.autocast with
bfloat16, as delta's --precision bf16 (parameters stay fp32).
Usage: bench_cuda_torch.py resnet50|gpt2 BATCH [T] [STEPS] [--mode M]
       [--amb F] [--device cuda|cpu] [--precision fp32|bf16] [size options]"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_train_torch import GPT  # noqa: E402

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = True
torch.set_float32_matmul_precision("highest")  # inductor's matmuls too
torch.manual_seed(0)


class Checkpointed(nn.Module):
    """A block whose activations are recomputed in backward: only its input
    is saved (torch.utils.checkpoint, non-reentrant; dropout's RNG state is
    restored for the recomputation)."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x):
        return checkpoint(self.block, x, use_reentrant=False)


def resnet50(a, dev):
    """Returns (model, input, target, loss(output, target), optimizer)."""
    import torchvision
    m = torchvision.models.resnet50(num_classes=a.classes).to(dev).train()
    if a.mode == "checkpoint":
        for layer in (m.layer1, m.layer2, m.layer3, m.layer4):
            for i in range(len(layer)):
                layer[i] = Checkpointed(layer[i])
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(a.batch, 3, a.image_size, a.image_size, device=dev)
    y = torch.randint(0, a.classes, (a.batch,), device=dev)
    return m, x, y, F.cross_entropy, opt


def gpt2(a, dev):
    """Returns (model, input, target, loss(output, target), optimizer)."""
    v, t = a.vocab, a.seq_len
    m = GPT(layers=a.layers, c=a.width, nh=a.heads, t=max(t, 1024), v=v,
            p=0.1).to(dev).train()
    if a.mode == "checkpoint":
        for i in range(len(m.h)):
            m.h[i] = Checkpointed(m.h[i])
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4, weight_decay=0.01)
    x = torch.randint(0, v, (a.batch, t), device=dev)
    y = torch.randint(0, v, (a.batch, t), device=dev)
    return m, x, y, lambda o, y: F.cross_entropy(o.view(-1, v), y.view(-1)), opt


def compile_missing():
    """Why torch.compile with an activation memory budget cannot run with
    this torch, or None."""
    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile (PyTorch 2.0+)"
    try:
        import torch._functorch.config as functorch_config
    except ImportError:
        functorch_config = None
    if not hasattr(functorch_config, "activation_memory_budget"):
        return f"torch {torch.__version__} has no activation_memory_budget (PyTorch 2.4+)"
    return None


def make_step(a, dev):
    m, x, y, loss, opt = (resnet50 if a.model == "resnet50" else gpt2)(a, dev)

    def fwd(x, y):
        with torch.autocast(dev.type, dtype=torch.bfloat16,
                            enabled=a.precision == "bf16"):
            return loss(m(x), y)
    if a.mode == "compile":
        why = compile_missing()
        if why:
            raise RuntimeError(why)
        import torch._functorch.config as functorch_config
        # read when AOTAutograd partitions the joint graph, at the first
        # call; this process compiles nothing else
        functorch_config.activation_memory_budget = a.amb
        # the loss inside the compiled region, as a user would compile a
        # training step's forward: its saved tensors are partitioned too
        fwd = torch.compile(fwd)

    def step():
        opt.zero_grad(set_to_none=True)
        fwd(x, y).backward()
        opt.step()
    return step


def reset_rss_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident set


def rss_peak():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def measure(step, steps, dev):
    """Returns (first step s, median of `steps` timed steps s, peak bytes
    over the timed steps), after the first step and two more of warm-up."""
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    t0 = time.perf_counter()
    step()
    sync()
    first = time.perf_counter() - t0
    for _ in range(2):
        step()
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
        ev[0].record()
        for e in ev[1:]:
            step()
            e.record()
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) / 1e3 for s, e in zip(ev, ev[1:])]
        return first, statistics.median(times), torch.cuda.max_memory_allocated(dev)
    reset_rss_peak()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return first, statistics.median(times), rss_peak()


def parse(argv):
    p = argparse.ArgumentParser(description="PyTorch's side of make bench-cuda "
                                "(see the top of scripts/bench_cuda_torch.py)")
    p.add_argument("model", choices=("resnet50", "gpt2"))
    p.add_argument("batch", type=int)
    p.add_argument("rest", type=int, nargs="*", help="resnet50: [STEPS]; gpt2: [T] [STEPS]")
    p.add_argument("--mode", choices=("eager", "checkpoint", "compile"), default="eager")
    p.add_argument("--amb", type=float, default=1.0,
                   help="compile: torch._functorch.config.activation_memory_budget")
    p.add_argument("--device", default="cuda")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=50257)
    a = p.parse_args(argv)
    rest = list(a.rest)
    a.seq_len = (rest.pop(0) if rest else 1024) if a.model == "gpt2" else 0
    a.steps = rest.pop(0) if rest else 10
    if rest:
        p.error(f"unexpected arguments {rest}")
    return a


def main(argv):
    a = parse(argv)
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print("bench_cuda_torch: no CUDA device for PyTorch", file=sys.stderr)
        return 1
    try:
        first, s, peak = measure(make_step(a, dev), a.steps, dev)
    except Exception as e:  # a result: this mode cannot run here
        msg = str(e).strip().splitlines()
        print(f"failed: {type(e).__name__}: {msg[0][:300] if msg else ''}", flush=True)
        return 1
    print(f"step_s {s:.6f}")
    print(f"peak_bytes {peak}")
    print(f"{'compile_s' if a.mode == 'compile' else 'first_step_s'} {first:.3f}")
    print(f"device {torch.cuda.get_device_name(dev) if dev.type == 'cuda' else 'cpu'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
