#!/usr/bin/python3
"""Run with Debian's Python, which has torch: /usr/bin/python3 scripts/make_sched_fixture.py

PyTorch reference for the learning-rate schedule and gradient clipping
(tests/test_sched.c): a linear layer with cross entropy trained by
torch.optim.AdamW under a LambdaLR of llm.c's cosine schedule with warmup,
clipping with torch.nn.utils.clip_grad_norm_ before every step.

Writes tests/fixtures/sched_clip.bin: magic b"DSCH", version 1 (int32),
then int32 N, IN, OUT, STEPS, WARMUP, then float64 LR, MIN_FRAC, CLIP, WD,
then float32 arrays: x (N, IN), w0 (OUT, IN), b0 (OUT), w (OUT, IN) and
b (OUT) after STEPS steps, and the STEPS global norms clip_grad_norm_
returned; then int32 y (N)."""
import math
import struct
import sys

import torch

N, IN, OUT, STEPS, WARMUP = 8, 4, 3, 6, 2
LR, MIN_FRAC, CLIP, WD = 0.05, 0.1, 0.05, 0.01


def factor(step):
    """llm.c's cosine schedule over STEPS steps, as a multiple of LR."""
    if step < WARMUP:
        return (step + 1) / WARMUP
    r = min(1.0, (step - WARMUP) / (STEPS - WARMUP))
    return MIN_FRAC + 0.5 * (1.0 + math.cos(math.pi * r)) * (1.0 - MIN_FRAC)


def main(out):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(N, IN, generator=g)
    y = torch.randint(0, OUT, (N,), generator=g, dtype=torch.int32)
    w0 = torch.randn(OUT, IN, generator=g) * 0.5
    b0 = torch.randn(OUT, generator=g) * 0.1
    lin = torch.nn.Linear(IN, OUT)
    with torch.no_grad():
        lin.weight.copy_(w0)
        lin.bias.copy_(b0)
    opt = torch.optim.AdamW(lin.parameters(), lr=LR, betas=(0.9, 0.999),
                            eps=1e-8, weight_decay=WD)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    norms = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(lin(x), y.long())
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(
            lin.parameters(), CLIP)))
        opt.step()
        sched.step()
    with open(out, "wb") as f:
        f.write(b"DSCH" + struct.pack("<6i", 1, N, IN, OUT, STEPS, WARMUP))
        f.write(struct.pack("<4d", LR, MIN_FRAC, CLIP, WD))
        for t in (x, w0, b0, lin.weight.detach(), lin.bias.detach(),
                  torch.tensor(norms)):
            f.write(t.float().contiguous().numpy().tobytes())
        f.write(y.numpy().astype("<i4").tobytes())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/sched_clip.bin")
