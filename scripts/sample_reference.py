#!/usr/bin/python3
"""Greedy decoding of a GPT-2 checkpoint in PyTorch: the reference
`delta sample --top-k 1` is checked against (tests/test_sample.c).

    /usr/bin/python3 scripts/sample_reference.py FILE --prompt-ids 1,2,3 \
        --tokens N [--seq-len T]

FILE is a safetensors checkpoint delta wrote (its metadata gives layers,
hidden, heads, vocab, positions). The module is the reference GPT-2 of
scripts/make_model_fixtures.py (Hugging Face's GPT2LMHeadModel names and
layout), run on exactly the last T tokens (T: --seq-len, else the
positions) at each step, without delta's padding, and the next token is
torch.argmax of the last position's logits (the first maximum: the lowest
id on ties). Prints the generated ids on one line, and on stderr the
smallest gap between the best and the second-best logit over the steps
(a tie closer than float rounding could go either way).
"""
import argparse
import os
import sys

try:
    import torch
except ImportError:
    sys.exit("sample_reference.py needs PyTorch: run it with Debian's "
             "Python, /usr/bin/python3 (package python3-torch)")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_checkpoint_fixture import read_safetensors  # noqa: E402
from make_model_fixtures import GPT2LMHeadModel  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--prompt-ids", required=True)
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--seq-len", type=int, default=0)
    a = ap.parse_args()
    tensors, meta = read_safetensors(a.file)
    L, C, NH = int(meta["layers"]), int(meta["hidden"]), int(meta["heads"])
    V, P = int(meta["vocab"]), int(meta["positions"])
    m = GPT2LMHeadModel(L, C, NH, V, P)
    sd = {k: v for k, v in tensors.items()
          if k in m.state_dict() and not k.startswith("optimizer.")}
    m.load_state_dict(sd, strict=True)
    m.eval()
    ctx = a.seq_len or P
    ids = [int(x) for x in a.prompt_ids.split(",")]
    out, gap = [], float("inf")
    with torch.no_grad():
        for _ in range(a.tokens):
            window = torch.tensor([ids[-ctx:]], dtype=torch.long)
            logits = m(window)[-1]
            top = torch.topk(logits, 2).values
            gap = min(gap, float(top[0] - top[1]))
            nxt = int(torch.argmax(logits))
            ids.append(nxt)
            out.append(nxt)
    print(" ".join(str(i) for i in out))
    print("smallest gap between the two best logits: %.3g" % gap,
          file=sys.stderr)


if __name__ == "__main__":
    main()
