#!/usr/bin/python3
"""The simulator's memory model against PyTorch's: activation bytes a
training step keeps for backward, at batch 1, for ResNet-50 (224x224) and
GPT-2 small (T 1024). Part of scripts/results.sh (make results).

  validate_memory.py DELTA_BIN OUT_DIR     writes OUT_DIR/memory.md, .json

PyTorch (Debian's python3-torch and torchvision, CPU, fp32): one forward
pass in training mode under torch.autograd.graph.saved_tensors_hooks; every
tensor autograd saves is recorded, deduplicated by storage (a view and its
base, or a tensor saved by two ops, count once) and counted by its storage's
bytes; parameters and the step's inputs (images, tokens, targets) are left
out. delta: `delta plan --json`'s saved_for_backward_bytes for the same
model and batch, the bytes of the activation roots a forward op produced
that are still alive when backward starts (the same question asked of
delta's program; both sides count views once). GPT-2 small is written out
below in plain torch with delta's layout (src/models/gpt2.c: Hugging Face's
GPT2LMHeadModel, tanh GELU, dropout 0.1 after the embeddings, on the
attention probabilities and after both projections, lm_head tied to wte).
The breakdown by dtype and by the autograd node that saved a tensor is what
explains the differences."""
import collections
import json
import math
import os
import subprocess
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

BIN, OUT = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
torch.set_num_threads(int(os.environ.get("THREADS", "1")))
MASKS = set()  # storages of the dropout masks made below


def dropout(x, p):
    """What F.dropout does on the CPU in this PyTorch (x times a float
    mask scaled by 1/(1-p), both saved by the multiply), with the mask's
    storage remembered so the table can count masks apart."""
    if p == 0:
        return x
    m = (torch.rand_like(x) >= p).to(x.dtype) / (1 - p)
    MASKS.add(m.storage().data_ptr())
    return x * m


class Block(nn.Module):
    """One GPT-2 block as delta builds it (B, T, C) -> (B, T, C)."""

    def __init__(self, C, NH, p):
        super().__init__()
        self.NH, self.p = NH, p
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        # HF Conv1D: weight (in, out), y = x W + b
        self.c_attn_w = nn.Parameter(torch.randn(C, 3 * C) * 0.02)
        self.c_attn_b = nn.Parameter(torch.zeros(3 * C))
        self.c_proj_w = nn.Parameter(torch.randn(C, C) * 0.02)
        self.c_proj_b = nn.Parameter(torch.zeros(C))
        self.c_fc_w = nn.Parameter(torch.randn(C, 4 * C) * 0.02)
        self.c_fc_b = nn.Parameter(torch.zeros(4 * C))
        self.mlp_proj_w = nn.Parameter(torch.randn(4 * C, C) * 0.02)
        self.mlp_proj_b = nn.Parameter(torch.zeros(C))

    def forward(self, x, causal):
        B, T, C = x.shape
        NH, D = self.NH, C // self.NH
        h = self.ln_1(x) @ self.c_attn_w + self.c_attn_b
        q, k, v = (t.reshape(B, T, NH, D).transpose(1, 2) for t in h.split(C, dim=2))
        s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D))
        s = s.masked_fill(causal, float("-inf"))
        a = dropout(torch.softmax(s, dim=-1), self.p) @ v
        a = a.transpose(1, 2).reshape(B, T, C) @ self.c_proj_w + self.c_proj_b
        x = x + dropout(a, self.p)
        h = F.gelu(self.ln_2(x) @ self.c_fc_w + self.c_fc_b, approximate="tanh")
        h = h @ self.mlp_proj_w + self.mlp_proj_b
        return x + dropout(h, self.p)


class GPT2(nn.Module):
    def __init__(self, L=12, C=768, NH=12, V=50257, P=1024, p=0.1):
        super().__init__()
        self.p = p
        self.wte = nn.Parameter(torch.randn(V, C) * 0.02)
        self.wpe = nn.Parameter(torch.randn(P, C) * 0.02)
        self.h = nn.ModuleList(Block(C, NH, p) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T)
        causal = torch.ones(T, T, dtype=torch.bool).triu(1)  # True: masked
        x = dropout(F.embedding(idx, self.wte) + F.embedding(pos, self.wpe), self.p)
        for blk in self.h:
            x = blk(x, causal)
        x = self.ln_f(x)
        logits = x.reshape(B * T, -1) @ self.wte.t()
        return F.cross_entropy(logits, targets.reshape(-1))


def saved_bytes(model, inputs, run):
    """Runs the forward pass, returns (activation bytes saved, of which
    dropout masks, bytes by dtype, bytes by the op that produced them)."""
    model.train()
    skip = {p.storage().data_ptr() for p in model.parameters()}
    skip |= {t.storage().data_ptr() for t in inputs}
    seen = {}

    def pack(t):
        st = t.storage()
        ptr = st.data_ptr()
        if ptr not in skip and ptr not in seen:
            node = (t.grad_fn.name() if t.grad_fn is not None else
                    "dropout mask" if ptr in MASKS else "(no grad_fn)")
            seen[ptr] = (st.nbytes(), str(t.dtype).replace("torch.", ""), node)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = run()
    del loss
    by_dtype, by_node = collections.Counter(), collections.Counter()
    for n, dt, node in seen.values():
        by_dtype[dt] += n
        by_node[node] += n
    return sum(by_dtype.values()), by_node["dropout mask"], by_dtype, by_node


def delta_saved(args):
    path = os.path.join(OUT, "plan.json")
    subprocess.run([BIN, "plan"] + args + ["--backend", "sim", "--quiet", "--json", path],
                   check=True, stdout=subprocess.DEVNULL)
    d = json.load(open(path))["plan"]
    os.unlink(path)
    return d


def main():
    os.makedirs(OUT, exist_ok=True)
    results = []

    rn = torchvision.models.resnet50()
    img = torch.randn(1, 3, 224, 224)
    lbl = torch.randint(0, 1000, (1,))
    results.append(("ResNet-50", "224x224x3, batch 1, torchvision's resnet50 (in-place ReLU)",
                    ["--model", "resnet50", "--batch", "1"],
                    saved_bytes(rn, [img, lbl], lambda: F.cross_entropy(rn(img), lbl)),
                    sum(p.numel() * 4 for p in rn.parameters())))
    del rn

    idx = torch.randint(0, 50257, (1, 1024))
    tgt = torch.randint(0, 50257, (1, 1024))
    for p in (0.1, 0.0):
        g = GPT2(p=p)
        results.append(("GPT-2 small", f"T 1024, batch 1, dropout {p}, plain torch with delta's layout",
                        ["--model", "gpt2-small", "--seq-len", "1024", "--batch", "1",
                         "--dropout", str(p)],
                        saved_bytes(g, [idx, tgt], lambda: g(idx, tgt)),
                        sum(q.numel() * 4 for q in g.parameters())))
        del g

    md = ["## The simulator's memory model against PyTorch\n",
          "Activation bytes a training step keeps for backward at batch 1 (fp32): PyTorch "
          f"{torch.__version__} (Debian) measured with `torch.autograd.graph.saved_tensors_hooks` "
          "(deduplicated by storage; parameters and inputs left out) against `delta plan --json`'s "
          "`saved_for_backward_bytes` for the same model (activations a forward op produced that are "
          "still alive when backward starts). Goal: within 10%. Script: `scripts/validate_memory.py`.\n",
          "| model | configuration | PyTorch saved | of which dropout masks | delta | delta / PyTorch | delta / PyTorch less masks | parameters |",
          "|---|---|---|---|---|---|---|---|"]
    out = []
    for name, cfg, args, (tot, masks, dt, nd), params in results:
        d = delta_saved(args)
        ours = d["saved_for_backward_bytes"]
        md.append(f"| {name} | {cfg} | {tot / 1e6:.1f} MB | {masks / 1e6:.1f} MB | {ours / 1e6:.1f} MB | "
                  f"{ours / tot:.3f} | {ours / (tot - masks):.3f} | {params / 1e6:.1f} MB |")
        out.append({"model": name, "config": cfg, "pytorch_bytes": tot, "mask_bytes": masks,
                    "by_dtype": dict(dt), "by_producer": dict(nd), "delta_bytes": ours,
                    "delta_plan": d, "param_bytes": params})
    md.append("")
    md.append("What PyTorch saved, by dtype and by the op that produced the saved tensor (MB):\n")
    for o in out:
        md.append(f"- {o['model']}, {o['config'].split(', plain')[0]}: " +
                  ", ".join(f"{k} {v / 1e6:.1f}" for k, v in sorted(o["by_dtype"].items())) + "; " +
                  ", ".join(f"{k} {v / 1e6:.1f}" for k, v in
                            sorted(o["by_producer"].items(), key=lambda kv: -kv[1])[:7]))
    md.append("")
    rn_o, g_o = out[0], out[1]
    idx64 = rn_o["by_dtype"].get("int64", 0)
    md.append(
        "Why they differ. ResNet-50: delta's max-pool backward reads the pool's input and finds "
        f"each window's maximum again, where PyTorch also saves int64 indices ({idx64 / 1e6:.1f} MB); "
        "delta / PyTorch's fp32 bytes is "
        f"{rn_o['delta_bytes'] / rn_o['by_dtype'].get('float32', 1):.3f}, the rest being batch norm's "
        "running statistics (PyTorch saves them in the node; delta holds them as state) and the 256-byte "
        "rounding of delta's blocks. Both keep one tensor per conv–BN–ReLU for the BN input and one "
        "for the ReLU output (torchvision's ReLU is in place, delta's writes a new tensor that the "
        "next convolution reads, so the count is the same). GPT-2 small: the whole difference is the "
        f"dropout masks. PyTorch on the CPU saves a float32 mask per dropout ({g_o['mask_bytes'] / 1e6:.1f} MB; "
        f"on CUDA its fused dropout saves a bool mask, a quarter of that); delta saves none, since a "
        "dropout mask is a function of the seed, the op and the step and backward makes it again. "
        f"Without the masks, or with dropout 0, the two agree to {abs(1 - out[2]['delta_bytes'] / out[2]['pytorch_bytes']):.1%}. "
        "The attention probabilities are the largest term on both sides (softmax output, and the "
        "dropout's output that the probabilities × V product reads); PyTorch's matmul saves its operands "
        "reshaped to 3-D (the ReshapeAlias entries: views of the dropout's output, copies of the "
        "transposed heads), delta's head split writes the transposed heads as tensors of their own.\n")
    md.append("../shared/REFERENCES.md lists 94.5 MB (ResNet-50) and 1.93 GB (GPT-2 small) for the same "
              "question, measured by a method it does not record; the figures above are this script's, "
              "by the method stated.\n")
    open(os.path.join(OUT, "memory.md"), "w").write("\n".join(md) + "\n")
    json.dump(out, open(os.path.join(OUT, "memory.json"), "w"), indent=1)
    for o in out:
        print(f"  {o['model']}: PyTorch {o['pytorch_bytes'] / 1e6:.1f} MB, delta "
              f"{o['delta_bytes'] / 1e6:.1f} MB, ratio {o['delta_bytes'] / o['pytorch_bytes']:.3f}",
              file=sys.stderr)


if __name__ == "__main__":
    main()
