"""PyTorch's side of `make bench-train`: the same two training jobs as delta's
(ResNet-18 on 1x28x28 images, batch 64, SGD; a GPT-2-shaped model, 4 layers,
128 wide, 4 heads, T 64, vocab 256, batch 8, AdamW), on random data of the
right shapes, timed over `steps` steps after warm-up. Prints
"resnet18 samples_per_s X" and "gpt2 tokens_per_s Y" (its GPT class is also
the GPU benchmark's, scripts/bench_cuda_torch.py). Run with Debian's
python3 (python3-torch, python3-torchvision)."""
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

threads, steps = 2, 20  # set from the command line below


def timed(step, n):
    for _ in range(3):
        step()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    return (time.perf_counter() - t0) / n


def resnet18():
    import torchvision
    m = torchvision.models.resnet18(num_classes=10)
    m.conv1 = nn.Conv2d(1, 64, 7, 2, 3, bias=False)
    m.train()
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(64, 1, 28, 28)
    y = torch.randint(0, 10, (64,))

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(m(x), y).backward()
        opt.step()
    return 64 / timed(step, steps)


class Block(nn.Module):
    def __init__(self, c, nh, p):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.c_attn, self.c_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.c_fc, self.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        self.nh, self.p = nh, p

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.nh, c // self.nh).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (k.shape[-1] ** 0.5)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = F.dropout(att.masked_fill(~mask, float("-inf")).softmax(-1), self.p)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + F.dropout(self.c_proj(y), self.p)
        h = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
        return x + F.dropout(self.mlp_proj(h), self.p)


class GPT(nn.Module):
    def __init__(self, layers=4, c=128, nh=4, t=64, v=256, p=0.1):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(v, c), nn.Embedding(t, c)
        self.h = nn.ModuleList(Block(c, nh, p) for _ in range(layers))
        self.ln_f, self.p = nn.LayerNorm(c), p

    def forward(self, idx):
        t = idx.shape[1]
        x = F.dropout(self.wte(idx) + self.wpe(torch.arange(t, device=idx.device)), self.p)
        for blk in self.h:
            x = blk(x)
        return self.ln_f(x) @ self.wte.weight.t()


def gpt2():
    m = GPT()
    m.train()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x = torch.randint(0, 256, (8, 64))
    y = torch.randint(0, 256, (8, 64))

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(m(x).view(-1, 256), y.view(-1)).backward()
        opt.step()
    return 8 * 64 / timed(step, steps)


if __name__ == "__main__":  # scripts/bench_cuda_torch.py imports GPT
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    print(f"resnet18 samples_per_s {resnet18():.1f}", flush=True)
    print(f"gpt2 tokens_per_s {gpt2():.1f}", flush=True)
