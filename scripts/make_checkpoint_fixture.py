#!/usr/bin/python3
"""Checkpoints between delta and PyTorch, both directions.

Run with Debian's Python, which has torch:

    /usr/bin/python3 scripts/make_checkpoint_fixture.py
        writes tests/fixtures/checkpoints/{resnet18,gpt2}_torch.safetensors:
        the state dicts of two tiny PyTorch models, as
        safetensors.torch.save_file would store them ("format": "pt" in the
        metadata, every state-dict entry, num_batches_tracked as I64
        scalars, GPT-2's lm_head.weight as its own copy of the tied
        embedding). tests/test_cli.c loads them with `delta train --load`.

    /usr/bin/python3 scripts/make_checkpoint_fixture.py --check FILE...
        the other direction: reads checkpoints that `delta train --save`
        wrote, builds the PyTorch module their metadata names (model and
        config), and loads them with load_state_dict(strict=True); then
        checks every value came through and runs a forward pass. A training
        checkpoint (--checkpoint-every, metadata "checkpoint": "training")
        also holds the optimizer's state under "optimizer.<param>.<slot>":
        those entries are set apart before load_state_dict and put into
        a torch.optim optimizer of the metadata's settings, as
        docs/CHECKPOINTS.md tells PyTorch users to. Prints "ok FILE" per
        file; exits 1 on any failure.

The modules are the reference modules of scripts/make_model_fixtures.py:
torchvision's ResNet with a width parameter (and torchvision's own ResNet
when the width is torchvision's 64 and torchvision is installed), and
minimal modules with exactly Hugging Face's GPT2LMHeadModel and
BertForMaskedLM parameter names and layouts; --check loads GPT-2 and BERT
files into HFGPT2LMHeadModel and HFBertForMaskedLM below, whose tied heads
(lm_head.weight; cls.predictions.decoder.{weight,bias}) are in their state
dicts as in transformers', and requires the metadata format transformers'
loader requires ("pt"). The safetensors files are
read and written by the small pure-Python code below (json + struct), not
by the safetensors package.

Fixture configurations (the flags test_cli.c passes to delta):
    resnet18_torch   resnet18 --width 4 --image-size 28 --channels 1
                     --classes 10; num_batches_tracked = 7
    gpt2_torch       gpt2-tiny --hidden 32 (layers 2, heads 2, vocab 256,
                     seq_len 64, 1024 positions)
"""
import json
import os
import struct
import sys
import zlib

try:
    import torch
    import torch.nn as nn
except ImportError:
    sys.exit("make_checkpoint_fixture.py needs PyTorch: run it with "
             "Debian's Python, /usr/bin/python3 (package python3-torch)")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_model_fixtures import (RESNETS, MLP, GPT2LMHeadModel,  # noqa: E402
                                 BertForMaskedLM, fill_params, gelu_tanh)
from make_fixtures import write_safetensors as write_fixture  # noqa: E402


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, tensor), stored in that order with their own
    dtype (F32, F64, I32 or I64); metadata: str -> str."""
    write_fixture(path, tensors, metadata, keep_dtype=True)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "checkpoints")

# safetensors dtype -> torch dtype, struct format and size (for reading)
DTYPES = {"F32": (torch.float32, "f", 4), "F64": (torch.float64, "d", 8),
          "I32": (torch.int32, "i", 4), "I64": (torch.int64, "q", 8)}


# ---- safetensors, pure Python ----------------------------------------------

def read_safetensors(path):
    """Returns ({name: tensor}, metadata)."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    data = buf[8 + n:]
    out = {}
    for name, e in header.items():
        dtype, fmt, size = DTYPES[e["dtype"]]
        b, end = e["data_offsets"]
        count = (end - b) // size
        vals = struct.unpack("<%d%s" % (count, fmt), data[b:end])
        out[name] = torch.tensor(vals, dtype=dtype).reshape(e["shape"])
    return out, meta


# ---- transformers' task modules, exactly as their state dicts are ------------

class HFGPT2LMHeadModel(GPT2LMHeadModel):
    """transformers' GPT2LMHeadModel: lm_head is an nn.Linear(C, V,
    bias=False) whose weight is transformer.wte.weight (tied), so
    state_dict() lists lm_head.weight beside the embedding and
    load_state_dict(strict=True) requires it. Its attention's causal-mask
    buffers (attn.bias, attn.masked_bias) are non-persistent in
    transformers, so no state dict holds them."""

    def __init__(self, L, C, nh, V, P):
        super().__init__(L, C, nh, V, P)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.transformer.wte.weight

    def forward(self, tokens):
        h = self.transformer(tokens)
        return self.lm_head(h).reshape(-1, self.lm_head.weight.shape[0])


class HFBertForMaskedLM(BertForMaskedLM):
    """transformers' BertForMaskedLM: cls.predictions.decoder is an
    nn.Linear(C, V) whose weight is the word embeddings and whose bias is
    cls.predictions.bias (both tied), listed in state_dict() under the
    decoder's names too."""

    def __init__(self, L, C, nh, V, P, act):
        super().__init__(L, C, nh, V, P, act=act)
        pred = self.cls.predictions
        pred.decoder = nn.Linear(C, V)
        pred.decoder.weight = self.bert.embeddings.word_embeddings.weight
        pred.decoder.bias = pred.bias


# transformers' from_pretrained refuses a safetensors file whose metadata
# has no "format" among these (modeling_utils: "does not contain the valid
# metadata")
TRANSFORMERS_FORMATS = ("pt", "tf", "flax", "mlx")


# ---- the fixtures -------------------------------------------------------------

def resnet_fixture():
    block, layers = RESNETS["resnet18"]
    from make_model_fixtures import ResNet
    m = ResNet(block, layers, classes=10, width=4, channels=1)
    fill_params(m)
    sd = m.state_dict()
    for k in sd:
        if k.endswith("num_batches_tracked"):
            sd[k].fill_(7)
    return [(k, v) for k, v in sd.items()]


def gpt2_fixture():
    m = GPT2LMHeadModel(2, 32, 2, 256, 1024)
    fill_params(m)
    sd = list(m.state_dict().items())
    # Hugging Face's state dict lists the tied head too.
    sd.append(("lm_head.weight", m.transformer.wte.weight.detach().clone()))
    return sd


def make_fixtures():
    os.makedirs(OUT_DIR, exist_ok=True)
    for name, make in [("resnet18_torch", resnet_fixture),
                       ("gpt2_torch", gpt2_fixture)]:
        torch.manual_seed(zlib.crc32(("checkpoint-" + name).encode()))
        path = os.path.join(OUT_DIR, name + ".safetensors")
        write_safetensors(path, make(), {"format": "pt"})
        print("%-52s %8d bytes" % (os.path.relpath(path, ROOT),
                                   os.path.getsize(path)))
    return 0


# ---- the other direction: delta's checkpoints in PyTorch --------------------

def module_for(meta):
    """The PyTorch module of a delta checkpoint's model and config."""
    name = meta.get("model", "")
    cfg = {k: int(v) for k, v in meta.items() if v.lstrip("-").isdigit()}
    if name == "mlp":
        c, s = cfg["channels"], cfg["image_size"]
        return MLP(c * s * s, cfg["mlp_hidden"], cfg["classes"])
    if name in RESNETS:
        block, layers = RESNETS[name]
        if cfg.get("width", 64) == 64:
            try:
                import torchvision
                m = getattr(torchvision.models, name)(
                    num_classes=cfg["classes"])
                if cfg["channels"] != 3:
                    m.conv1 = nn.Conv2d(cfg["channels"], 64, 7, 2, 3,
                                        bias=False)
                return m
            except ImportError:
                pass
        from make_model_fixtures import ResNet
        return ResNet(block, layers, classes=cfg["classes"],
                      width=cfg["width"], channels=cfg["channels"])
    if name.startswith("gpt2"):
        return HFGPT2LMHeadModel(cfg["layers"], cfg["hidden"], cfg["heads"],
                                 cfg["vocab"], cfg["positions"])
    if name.startswith("bert"):
        return HFBertForMaskedLM(cfg["layers"], cfg["hidden"], cfg["heads"],
                                 cfg["vocab"], cfg["positions"],
                                 act=gelu_tanh)
    raise ValueError("unknown model '%s' in the metadata" % name)


def torch_optimizer(m, opt_sd, meta):
    """A torch.optim optimizer of m with the settings and state of a delta
    training checkpoint: opt_sd holds "optimizer.<param>.<slot>" tensors.
    torch keeps AdamW's step per parameter; delta's is the checkpoint's
    session_step."""
    lr, wd = float(meta["lr"]), float(meta["weight_decay"])
    momentum = float(meta["momentum"])
    if meta["optimizer"] == "sgd":
        opt = torch.optim.SGD(m.parameters(), lr=lr, momentum=momentum,
                              weight_decay=wd)
        slots = ["momentum_buffer"] if momentum > 0 else []
    else:
        opt = torch.optim.AdamW(m.parameters(), lr=lr, betas=(momentum, 0.999),
                                eps=1e-8, weight_decay=wd)
        slots = ["exp_avg", "exp_avg_sq"]
    used = set()
    for name, p in m.named_parameters():
        state = {}
        for slot in slots:
            key = "optimizer.%s.%s" % (name, slot)
            state[slot] = opt_sd[key].clone()
            used.add(key)
        if meta["optimizer"] == "adamw":
            state["step"] = torch.tensor(float(meta["session_step"]))
        if state:
            opt.state[p] = state
    if used != set(opt_sd):
        raise ValueError("optimizer entries without a parameter: %s"
                         % sorted(set(opt_sd) - used)[:5])
    return opt


def check(path):
    sd, meta = read_safetensors(path)
    if meta.get("format") not in TRANSFORMERS_FORMATS:
        raise ValueError("metadata format is %r: transformers' loader takes "
                         "only %s" % (meta.get("format"),
                                      ", ".join(TRANSFORMERS_FORMATS)))
    opt_sd = {k: sd.pop(k) for k in list(sd) if k.startswith("optimizer.")}
    if opt_sd and meta.get("checkpoint") != "training":
        raise ValueError("optimizer entries in a file that is not a "
                         "training checkpoint")
    m = module_for(meta)
    m.load_state_dict(sd, strict=True)  # raises on missing/unexpected keys
    if meta.get("checkpoint") == "training":
        opt = torch_optimizer(m, opt_sd, meta)
        opt.load_state_dict(opt.state_dict())  # torch's own round trip
    for k, v in m.state_dict().items():
        if not torch.equal(v, sd[k].to(v.dtype)):
            raise ValueError("%s changed on loading" % k)
    m.eval()
    with torch.no_grad():
        name, cfg = meta["model"], meta
        if name.startswith("gpt2"):
            out = m(torch.zeros(1, int(cfg["seq_len"]), dtype=torch.long))
        elif name.startswith("bert"):
            T = int(cfg["seq_len"])
            out = m(torch.zeros(1, T, dtype=torch.long), torch.ones(1, T))
        else:
            c, s = int(cfg["channels"]), int(cfg["image_size"])
            out = m(torch.zeros(2, c, s, s))
    if not torch.isfinite(out).all():
        raise ValueError("the forward pass gives non-finite values")
    return "%s: %d tensors, %d of optimizer state, model %s, step %s" % (
        path, len(sd), len(opt_sd), meta.get("model"), meta.get("step"))


def main(argv):
    if argv[:1] == ["--check"]:
        if len(argv) < 2:
            sys.exit("usage: make_checkpoint_fixture.py --check FILE...")
        bad = 0
        for path in argv[1:]:
            try:
                print("ok   " + check(path))
            except Exception as e:  # report every file, then fail
                print("FAIL %s: %s" % (path, e))
                bad += 1
        return 1 if bad else 0
    if argv:
        sys.exit(__doc__)
    return make_fixtures()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
