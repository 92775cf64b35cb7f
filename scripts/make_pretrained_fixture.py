#!/usr/bin/python3
"""A pretrained GPT-2 as Hugging Face publishes one, and the first loss
PyTorch computes from it on an llm.c token file (tests/test_pretrained.sh).

    /usr/bin/python3 scripts/make_pretrained_fixture.py OUT_DIR

writes, for a small GPT-2 (2 blocks, width 64, 2 heads, vocab 512, 128
positions) drawn at random (seeded: every run writes the same bytes):

    OUT_DIR/hub/model.safetensors     F32, the Hub's gpt2 layout: GPT2Model
                                      names (h.0.attn.c_attn.weight, no
                                      "transformer."), the attn.bias mask
                                      buffers, no lm_head (tied)
    OUT_DIR/hub/config.json           GPT2Config's keys
    OUT_DIR/bf16/model.safetensors    BF16, GPT2LMHeadModel's state dict:
                                      transformer.* names and the tied
                                      lm_head.weight as its own copy
    OUT_DIR/bf16/config.json
    OUT_DIR/tokens.bin                llm.c's token file (header of 256
                                      int32: magic 20240520, version 1,
                                      count; then uint16 tokens)
    OUT_DIR/reference.txt             "f32 LOSS" and "bf16 LOSS": the mean
                                      cross-entropy of the first batch
                                      (B 4 x T 32 in file order: tokens
                                      [0, B*T) in, [1, B*T+1) targets) in
                                      float64 from the file's exact values

Transformers itself is not needed: the module is make_model_fixtures.py's
GPT2LMHeadModel, which has exactly its parameter names and layouts.
"""
import json
import os
import struct
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit("make_pretrained_fixture.py needs PyTorch: run it with "
             "Debian's Python, /usr/bin/python3 (package python3-torch)")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import write_safetensors  # noqa: E402
from make_model_fixtures import GPT2LMHeadModel  # noqa: E402

L, C, NH, V, P = 2, 64, 2, 512, 128
B, T = 4, 32
N_TOKENS = 3 * B * T + 1
MAGIC, VERSION = 20240520, 1


def draw(seed):
    """GPT-2's initialisation (N(0, 0.02), layer norms 1/0, biases small so
    they matter), float32."""
    g = torch.Generator().manual_seed(seed)
    m = GPT2LMHeadModel(L, C, NH, V, P)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") \
                    or name.endswith("ln_f.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.02 * torch.randn(p.shape, generator=g))
    return m


def hub_tensors(m):
    """The Hub's gpt2 file: GPT2Model names, mask buffers, no lm_head."""
    out = []
    mask = torch.ones(P, P).tril().reshape(1, 1, P, P)
    for name, p in m.transformer.named_parameters():
        out.append((name, p.detach()))
        if name.endswith("ln_1.bias"):
            out.append((name.replace("ln_1.bias", "attn.bias"), mask))
    return out


def pretrained_tensors(m):
    """save of GPT2LMHeadModel's state dict: transformer.* and lm_head."""
    out = [(n, p.detach().to(torch.bfloat16)) for n, p in m.named_parameters()]
    out.append(("lm_head.weight",
                m.transformer.wte.weight.detach().to(torch.bfloat16)))
    return out


def config():
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
            "n_layer": L, "n_embd": C, "n_head": NH, "vocab_size": V,
            "n_positions": P, "n_ctx": P, "activation_function": "gelu_new",
            "layer_norm_epsilon": 1e-5, "torch_dtype": "float32"}


def first_loss(m, tokens):
    x = torch.tensor(tokens[:B * T]).reshape(B, T)
    y = torch.tensor(tokens[1:B * T + 1]).reshape(B, T)
    m = m.double()
    with torch.no_grad():
        logits = m(x)
    return F.cross_entropy(logits, y.reshape(-1)).item()


def write_tokens(path, tokens):
    header = [MAGIC, VERSION, len(tokens)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))


def write_dir(d, tensors):
    os.makedirs(d, exist_ok=True)
    write_safetensors(os.path.join(d, "model.safetensors"), tensors,
                      {"format": "pt"}, keep_dtype=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config(), f, indent=2)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    m = draw(1234)
    g = torch.Generator().manual_seed(99)
    tokens = torch.randint(0, V, (N_TOKENS,), generator=g).tolist()
    write_tokens(os.path.join(out, "tokens.bin"), tokens)
    write_dir(os.path.join(out, "hub"), hub_tensors(m))
    write_dir(os.path.join(out, "bf16"), pretrained_tensors(m))
    f32 = first_loss(m, tokens)
    # the BF16 file's model: the same weights rounded to bf16, widened
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    bf16 = first_loss(m, tokens)
    with open(os.path.join(out, "reference.txt"), "w") as f:
        f.write("f32 %.10f\nbf16 %.10f\n" % (f32, bf16))


if __name__ == "__main__":
    main()
