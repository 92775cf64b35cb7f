#!/usr/bin/python3
"""Writes the PyTorch reference fixtures of tests/test_reference.c.

Run with Debian's Python, which has torch:

    /usr/bin/python3 scripts/make_fixtures.py

Each fixture is a small safetensors file in tests/fixtures/ holding, for one
op (or one block), one or more cases. A case with prefix P ("plain/", or ""
for files with a single case) stores:

    P<name>        every input and parameter, by name (I32 for ids/targets)
    PR             the upstream gradient: the loss is sum(out * R)
    Pout           the expected output
    Pgrad.<name>   the expected gradient of every differentiable input
    ...            extra expectations (running stats after the step, ...)

and its attributes (stride, pad, eps, causal, ...) as strings in
"__metadata__" under the keys P<attr>. "__metadata__"["cases"] lists the
prefixes of the file, comma-separated.

Inputs are drawn in float32 (torch.manual_seed, so the files are the same on
every run), the reference is computed in float64 from exactly those values,
and every result is rounded once to float32 when it is stored. The files are
written by the small pure-Python writer below (json + struct), not by the
safetensors package.
"""
import json
import math
import os
import struct
import sys
import zlib

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    sys.exit("make_fixtures.py needs PyTorch: run it with Debian's Python, "
             "/usr/bin/python3 (package python3-torch)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures")
REF = torch.float64


# ---- safetensors writer --------------------------------------------------

def _st_dtype(t, keep):
    """safetensors dtype and struct format of t: fixtures store float32 and
    int32 (keep False); checkpoints keep each tensor's own width (keep True,
    e.g. torchvision's I64 num_batches_tracked)."""
    if t.dtype in (torch.float32, torch.float64):
        return ("F64", "<%dd") if keep and t.dtype == torch.float64 else ("F32", "<%df")
    if t.dtype in (torch.int32, torch.int64):
        return ("I64", "<%dq") if keep and t.dtype == torch.int64 else ("I32", "<%di")
    if t.dtype == torch.bfloat16 and keep:
        return "BF16", "<%dh"  # the bits, written through an int16 view
    raise ValueError("unsupported dtype %s" % t.dtype)


def write_safetensors(path, tensors, metadata, keep_dtype=False):
    """tensors: list of (name, tensor) in file order; metadata: str -> str."""
    header = {}
    blobs = []
    off = 0
    for name, t in tensors:
        t = t.detach().cpu().contiguous()
        st, fmt = _st_dtype(t, keep_dtype)
        if st == "BF16":
            t = t.view(torch.int16)
        vals = t.reshape(-1).tolist()
        blob = struct.pack(fmt % len(vals), *vals)
        header[name] = {"dtype": st, "shape": list(t.shape),
                        "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


class Fixture:
    def __init__(self, name, description):
        self.name = name
        self.tensors = []
        self.names = set()
        self.meta = {"description": description,
                     "generator": "scripts/make_fixtures.py (torch %s)"
                                  % torch.__version__,
                     "reference": "computed in float64, stored as float32"}
        self.cases = []

    def add(self, name, t):
        assert name not in self.names, name
        self.names.add(name)
        self.tensors.append((name, t))

    def attr(self, prefix, key, value):
        if isinstance(value, bool):
            value = int(value)
        self.meta[prefix + key] = str(value)

    def case(self, prefix, inputs, fn, attrs=None, r_scale=1.0, r_shift=0.0):
        """inputs: ordered list of (name, tensor); float tensors marked
        requires_grad are differentiable. fn(**{name: tensor}) returns the
        output, or (output, {extra_name: tensor}) for extra expectations."""
        self.cases.append(prefix.rstrip("/") or "main")
        for k, v in (attrs or {}).items():
            self.attr(prefix, k, v)
        res = fn(**dict(inputs))
        extra = {}
        if isinstance(res, tuple):
            res, extra = res
        R = randn(*res.shape, scale=r_scale, shift=r_shift)
        (res * R).sum().backward()
        for name, t in inputs:
            self.add(prefix + name, t)
        self.add(prefix + "R", R)
        self.add(prefix + "out", res)
        for name, t in inputs:
            if t.requires_grad:
                assert t.grad is not None, name
                self.add(prefix + "grad." + name, t.grad)
        for name, t in extra.items():
            self.add(prefix + name, t)

    def write(self):
        self.meta["cases"] = ",".join(self.cases)
        path = os.path.join(OUT_DIR, self.name + ".safetensors")
        write_safetensors(path, self.tensors, self.meta)
        return path


# ---- helpers --------------------------------------------------------------

def randn(*shape, scale=1.0, shift=0.0, grad=False):
    """Drawn in float32 (so the stored value is exact), computed in float64."""
    t = (torch.randn(tuple(shape), dtype=torch.float32) * scale + shift)
    t = t.to(REF)
    return t.requires_grad_(grad)


def param(*shape, scale=1.0, shift=0.0):
    return randn(*shape, scale=scale, shift=shift, grad=True)


def rand_pos(*shape, lo=0.5, hi=1.5):
    t = (torch.rand(*shape, dtype=torch.float32) * (hi - lo) + lo)
    return t.to(REF)


def masked_softmax(x, causal, key_mask):
    """Softmax over the last dim of x (B, ..., Tq, Tk) with delta's masking:
    causal keeps k <= q + (Tk - Tq); key_mask (B, Tk) 0 masks key k of batch
    entry b; masked entries are 0 and a fully masked row is all 0."""
    tq, tk = x.shape[-2], x.shape[-1]
    keep = torch.ones(x.shape, dtype=torch.bool)
    if causal:
        q = torch.arange(tq).unsqueeze(1)
        k = torch.arange(tk).unsqueeze(0)
        keep = keep & (k <= q + (tk - tq))
    if key_mask is not None:
        b = x.shape[0]
        km = (key_mask != 0).reshape((b,) + (1,) * (x.dim() - 2) + (tk,))
        keep = keep & km
    m = x.masked_fill(~keep, float("-inf")).amax(-1, keepdim=True).detach()
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(torch.where(keep, x, torch.zeros_like(x)) - m) * keep
    s = e.sum(-1, keepdim=True)
    return e / torch.where(s > 0, s, torch.ones_like(s))


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


# ---- op fixtures -------------------------------------------------------------

def fx_matmul():
    fx = Fixture("matmul", "delta_matmul: alpha * op(a) op(b)")

    def mm(ta, tb, alpha):
        def f(a, b):
            aa = a.transpose(-2, -1) if ta else a
            bb = b.transpose(-2, -1) if tb else b
            return alpha * torch.matmul(aa, bb)
        return f

    for prefix, sa, sb, ta, tb, alpha in [
        ("plain/", (5, 7), (7, 6), 0, 0, 1.0),
        ("trans_a/", (7, 5), (7, 6), 1, 0, 1.0),
        ("trans_b/", (5, 7), (6, 7), 0, 1, 1.0),
        ("batched/", (2, 3, 5, 7), (2, 3, 7, 6), 0, 0, 0.5),
        ("batched_tt/", (2, 3, 7, 5), (2, 3, 6, 7), 1, 1, -1.25),
        ("shared_b/", (2, 4, 7), (7, 6), 0, 0, 1.0),
    ]:
        fx.case(prefix, [("a", param(*sa)), ("b", param(*sb))],
                mm(ta, tb, alpha),
                {"trans_a": ta, "trans_b": tb, "alpha": alpha})
    return fx


def fx_linear():
    fx = Fixture("linear", "delta_linear: x w^T + bias, torch.nn.Linear")
    fx.case("bias/", [("x", param(2, 3, 6)), ("weight", param(5, 6)),
                      ("bias", param(5))],
            lambda x, weight, bias: F.linear(x, weight, bias), {"has_bias": 1})
    fx.case("nobias/", [("x", param(4, 6)), ("weight", param(5, 6))],
            lambda x, weight: F.linear(x, weight), {"has_bias": 0})
    return fx


def fx_conv2d():
    fx = Fixture("conv2d", "delta_conv2d: cross-correlation, NCHW")
    for prefix, xs, ws, stride, pad, bias in [
        ("k3s1p1/", (2, 3, 8, 8), (4, 3, 3, 3), 1, 1, True),
        ("k3s2p1/", (2, 3, 9, 9), (5, 3, 3, 3), 2, 1, False),
        ("k1/", (2, 6, 5, 5), (4, 6, 1, 1), 1, 0, True),
        ("k7s2p3/", (2, 3, 16, 16), (4, 3, 7, 7), 2, 3, True),
    ]:
        inputs = [("x", param(*xs)), ("weight", param(*ws, scale=0.3))]
        if bias:
            inputs.append(("bias", param(ws[0])))

        def f(x, weight, bias=None, stride=stride, pad=pad):
            return F.conv2d(x, weight, bias, stride=stride, padding=pad)
        fx.case(prefix, inputs, f,
                {"stride": stride, "pad": pad, "has_bias": int(bias)})
    return fx


def bn_case(fx, prefix, xshape):
    c = xshape[1]
    rm0 = randn(c, scale=0.2)
    rv0 = rand_pos(c)
    momentum, eps = 0.1, 1e-5
    rm, rv = rm0.clone(), rv0.clone()

    def f(x, weight, bias, running_mean, running_var):
        y = F.batch_norm(x, rm, rv, weight, bias, training=True,
                         momentum=momentum, eps=eps)
        return y, {"running_mean.after": rm, "running_var.after": rv}
    fx.case(prefix, [("x", param(*xshape, scale=1.5, shift=0.3)),
                     ("weight", param(c, scale=0.2, shift=1.0)),
                     ("bias", param(c, scale=0.2)),
                     ("running_mean", rm0), ("running_var", rv0)],
            f, {"momentum": momentum, "eps": eps})


def fx_batchnorm2d():
    fx = Fixture("batchnorm2d", "delta_batchnorm training mode, x (N, C, H, W)")
    bn_case(fx, "", (4, 3, 5, 5))
    return fx


def fx_batchnorm1d():
    fx = Fixture("batchnorm1d", "delta_batchnorm training mode, x (N, C)")
    bn_case(fx, "", (8, 5))
    return fx


def fx_layernorm():
    fx = Fixture("layernorm", "delta_layernorm over the last dim")
    eps = 1e-5
    fx.case("affine/", [("x", param(2, 5, 16, scale=1.5, shift=0.3)),
                        ("weight", param(16, scale=0.2, shift=1.0)),
                        ("bias", param(16, scale=0.2))],
            lambda x, weight, bias: F.layer_norm(x, (16,), weight, bias, eps),
            {"eps": eps, "affine": 1})
    fx.case("noaffine/", [("x", param(6, 10, scale=2.0, shift=-0.5))],
            lambda x: F.layer_norm(x, (10,), None, None, eps),
            {"eps": eps, "affine": 0})
    return fx


def fx_relu():
    fx = Fixture("relu", "delta_relu")
    fx.case("", [("x", param(3, 4, 5))], lambda x: F.relu(x))
    return fx


def fx_gelu():
    fx = Fixture("gelu", "delta_gelu, tanh approximation")
    fx.case("", [("x", param(3, 4, 5, scale=2.0))], gelu_tanh)
    return fx


def fx_pool(kind):
    fn = {"maxpool2d": F.max_pool2d, "avgpool2d": F.avg_pool2d}[kind]
    fx = Fixture(kind, "delta_%s (avg: count_include_pad)" % kind)
    for prefix, k, s, p in [("k3s2p1/", 3, 2, 1), ("k2s2p0/", 2, 2, 0)]:
        fx.case(prefix, [("x", param(2, 3, 7, 7))],
                lambda x, k=k, s=s, p=p: fn(x, k, s, p),
                {"k": k, "stride": s, "pad": p})
    return fx


def fx_global_avgpool():
    fx = Fixture("global_avgpool",
                 "delta_global_avgpool: adaptive_avg_pool2d(x, 1) as (N, C)")
    fx.case("", [("x", param(2, 5, 4, 3))],
            lambda x: F.adaptive_avg_pool2d(x, 1).flatten(1))
    return fx


def fx_add():
    fx = Fixture("add", "delta_add, b broadcast over a's leading dims")
    for prefix, sa, sb in [("same/", (3, 4), (3, 4)),
                           ("trail2/", (2, 5, 6), (5, 6)),
                           ("trail1/", (2, 3, 4, 5), (5,))]:
        fx.case(prefix, [("a", param(*sa)), ("b", param(*sb))],
                lambda a, b: a + b)
    return fx


def fx_embedding():
    fx = Fixture("embedding", "delta_embedding, repeated ids")
    ids = torch.tensor([[1, 3, 3, 0, 9], [2, 3, 7, 1, 1], [9, 9, 4, 5, 0]],
                       dtype=torch.int32)
    fx.case("", [("ids", ids), ("table", param(10, 6))],
            lambda ids, table: F.embedding(ids.long(), table))
    return fx


def fx_softmax():
    fx = Fixture("softmax", "delta_softmax over the last dim: plain, causal "
                 "(k <= q + Tk - Tq), key padding mask; masked entries 0")
    km = torch.ones(2, 6, dtype=REF)
    km[0, 4:] = 0
    km[1, 0] = 0
    km[1, 2] = 0
    km5 = torch.ones(2, 5, dtype=REF)
    km5[0, 3] = 0
    km5[1, 0] = 0  # with causal: row q = 0 of batch 1 is fully masked
    for prefix, shape, causal, mask in [
        ("plain/", (2, 3, 4, 7), 0, None),
        ("causal/", (2, 3, 6, 6), 1, None),
        ("causal_rect/", (2, 2, 4, 7), 1, None),
        ("mask/", (2, 3, 5, 6), 0, km),
        ("causal_mask/", (2, 2, 5, 5), 1, km5),
    ]:
        inputs = [("x", param(*shape, scale=2.0))]
        if mask is not None:
            inputs.append(("key_mask", mask))

        def f(x, key_mask=None, causal=causal):
            return masked_softmax(x, causal, key_mask)
        fx.case(prefix, inputs, f,
                {"causal": causal, "has_mask": int(mask is not None)})
    return fx


def fx_attention():
    fx = Fixture("attention", "delta_attention: softmax(q k^T / sqrt(Dh)) v, "
                 "dropout 0")
    km = torch.ones(2, 6, dtype=REF)
    km[0, 5] = 0
    km[1, 1] = 0
    km[1, 3] = 0

    def att(q, k, v, key_mask=None, causal=False):
        s = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        return torch.matmul(masked_softmax(s, causal, key_mask), v)

    fx.case("causal/", [("q", param(2, 2, 6, 4)), ("k", param(2, 2, 6, 4)),
                        ("v", param(2, 2, 6, 4))],
            lambda q, k, v: att(q, k, v, causal=True),
            {"causal": 1, "has_mask": 0})
    fx.case("mask/", [("q", param(2, 2, 4, 4)), ("k", param(2, 2, 6, 4)),
                      ("v", param(2, 2, 6, 4)), ("key_mask", km)],
            lambda q, k, v, key_mask: att(q, k, v, key_mask),
            {"causal": 0, "has_mask": 1})
    return fx


def fx_cross_entropy():
    fx = Fixture("cross_entropy", "delta_cross_entropy, mean over rows not "
                 "equal to ignore_index; out and R are scalars")
    targets = torch.tensor([2, -100, 0, 4, 4, -100, 1], dtype=torch.int32)
    fx.case("", [("logits", param(7, 5, scale=2.0)), ("targets", targets)],
            lambda logits, targets: F.cross_entropy(
                logits, targets.long(), ignore_index=-100),
            {"ignore_index": -100}, r_scale=0.5, r_shift=1.5)
    return fx


def fx_transpose():
    fx = Fixture("transpose", "delta_transpose(x, d0, d1)")
    for prefix, shape, d0, d1 in [("d1_3/", (2, 3, 4, 5), 1, 3),
                                  ("d0_1/", (3, 4, 5), 0, 1),
                                  ("last2/", (2, 3, 4, 5), 2, 3)]:
        fx.case(prefix, [("x", param(*shape))],
                lambda x, d0=d0, d1=d1: x.transpose(d0, d1).contiguous(),
                {"d0": d0, "d1": d1})
    return fx


def fx_split_concat():
    fx = Fixture("split_concat", "delta_split then delta_concat of the parts "
                 "in another order, with an extra tensor y (mid: parts of "
                 "unequal size along the concat dim)")

    def f(x, y):
        p0, p1, p2 = torch.chunk(x, 3, dim=1)
        return torch.cat([p2, y, p0, p1], dim=2)
    fx.case("mid/", [("x", param(2, 6, 4)), ("y", param(2, 2, 3))], f,
            {"split_dim": 1, "n": 3, "concat_dim": 2, "order": "p2,y,p0,p1"})

    def e(x, y):
        p0, p1, p2 = torch.chunk(x, 3, dim=1)
        return torch.cat([p1, y, p2, p0], dim=2)
    fx.case("mid_equal/", [("x", param(2, 6, 4)), ("y", param(2, 2, 4))], e,
            {"split_dim": 1, "n": 3, "concat_dim": 2, "order": "p1,y,p2,p0"})

    def g(x):
        p = torch.chunk(x, 4, dim=1)
        return torch.cat([p[3], p[1], p[0], p[2]], dim=0)
    fx.case("last/", [("x", param(3, 8))], g,
            {"split_dim": 1, "n": 4, "concat_dim": 0, "order": "p3,p1,p0,p2"})
    return fx


def fx_optimizer():
    fx = Fixture("optimizer", "3 steps of torch.optim.SGD / AdamW on a "
                 "Linear(6, 4) with loss sum((x w^T + b) * R.<step>)")
    w0 = randn(4, 6, scale=0.5)
    b0 = randn(4, scale=0.5)
    x = randn(5, 6)
    rs = [randn(5, 4) for _ in range(3)]
    for prefix, make, attrs in [
        ("sgd/", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9,
                                            weight_decay=1e-4,
                                            nesterov=False),
         {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4, "nesterov": 0}),
        ("adamw/", lambda ps: torch.optim.AdamW(ps, lr=0.01,
                                                betas=(0.9, 0.999), eps=1e-8,
                                                weight_decay=0.01),
         {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
          "weight_decay": 0.01}),
    ]:
        fx.cases.append(prefix.rstrip("/"))
        for k, v in attrs.items():
            fx.attr(prefix, k, v)
        fx.attr(prefix, "steps", 3)
        w = w0.clone().requires_grad_(True)
        b = b0.clone().requires_grad_(True)
        opt = make([w, b])
        fx.add(prefix + "weight", w0)
        fx.add(prefix + "bias", b0)
        fx.add(prefix + "x", x)
        for s in range(3):
            opt.zero_grad()
            (F.linear(x, w, b) * rs[s]).sum().backward()
            fx.add(prefix + "R.%d" % s, rs[s])
            fx.add(prefix + "grad.weight.%d" % s, w.grad.clone())
            fx.add(prefix + "grad.bias.%d" % s, b.grad.clone())
            opt.step()
            fx.add(prefix + "weight.after.%d" % (s + 1), w.detach().clone())
            fx.add(prefix + "bias.after.%d" % (s + 1), b.detach().clone())
    return fx


# ---- blocks -------------------------------------------------------------------

def fx_transformer_block():
    fx = Fixture("transformer_block", "GPT-2 block (Hugging Face GPT2Block "
                 "semantics, nn.Linear weight layout), dropout 0")
    B, T, C, H = 2, 8, 32, 4
    D = C // H
    eps = 1e-5

    def lin(o, i):
        return param(o, i, scale=1.0 / math.sqrt(i)), param(o, scale=0.1)
    inputs = [("x", param(B, T, C))]
    inputs += [("ln_1.weight", param(C, scale=0.2, shift=1.0)),
               ("ln_1.bias", param(C, scale=0.1))]
    w, b = lin(3 * C, C)
    inputs += [("attn.c_attn.weight", w), ("attn.c_attn.bias", b)]
    w, b = lin(C, C)
    inputs += [("attn.c_proj.weight", w), ("attn.c_proj.bias", b)]
    inputs += [("ln_2.weight", param(C, scale=0.2, shift=1.0)),
               ("ln_2.bias", param(C, scale=0.1))]
    w, b = lin(4 * C, C)
    inputs += [("mlp.c_fc.weight", w), ("mlp.c_fc.bias", b)]
    w, b = lin(C, 4 * C)
    inputs += [("mlp.c_proj.weight", w), ("mlp.c_proj.bias", b)]

    def block(x, **p):
        h = F.layer_norm(x, (C,), p["ln_1.weight"], p["ln_1.bias"], eps)
        qkv = F.linear(h, p["attn.c_attn.weight"], p["attn.c_attn.bias"])
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (t.reshape(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        s = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(D)
        causal = torch.ones(T, T, dtype=torch.bool).triu(1)
        s = s.masked_fill(causal, float("-inf"))
        y = torch.matmul(torch.softmax(s, dim=-1), v)
        y = y.transpose(1, 2).reshape(B, T, C)
        y = F.linear(y, p["attn.c_proj.weight"], p["attn.c_proj.bias"])
        x = x + y
        h = F.layer_norm(x, (C,), p["ln_2.weight"], p["ln_2.bias"], eps)
        h = gelu_tanh(F.linear(h, p["mlp.c_fc.weight"], p["mlp.c_fc.bias"]))
        h = F.linear(h, p["mlp.c_proj.weight"], p["mlp.c_proj.bias"])
        return x + h
    fx.case("", inputs, block, {"n_head": H, "eps": eps})
    return fx


class Bottleneck(nn.Module):
    """torchvision.models.resnet.Bottleneck (v1.5: stride on conv2), same
    module names, written out because torchvision is not installed."""
    expansion = 4

    def __init__(self, inplanes, planes, stride, downsample):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1,
                               bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out = out + identity
        return self.relu(out)


def fx_resnet_bottleneck():
    fx = Fixture("resnet_bottleneck", "torchvision Bottleneck(16, 8, stride "
                 "2, downsample conv1x1 + BatchNorm2d), training mode")
    inplanes, planes, stride = 16, 8, 2
    ds = nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride=stride,
                                 bias=False),
                       nn.BatchNorm2d(planes * 4))
    m = Bottleneck(inplanes, planes, stride, ds).to(REF).train()
    # Values drawn in float32 like every other fixture: He-normal convs,
    # batch-norm affine near (1, 0), running stats away from their defaults.
    with torch.no_grad():
        for name, t in m.state_dict().items():
            if name.endswith("num_batches_tracked"):
                continue
            if t.dim() == 4:
                fan_in = t.shape[1] * t.shape[2] * t.shape[3]
                v = randn(*t.shape, scale=math.sqrt(2.0 / fan_in))
            elif name.endswith(".weight"):
                v = randn(*t.shape, scale=0.2, shift=1.0)
            elif name.endswith(".bias"):
                v = randn(*t.shape, scale=0.1)
            elif name.endswith("running_mean"):
                v = randn(*t.shape, scale=0.2)
            elif name.endswith("running_var"):
                v = rand_pos(*t.shape)
            t.copy_(v)
    before = {k: v.clone() for k, v in m.state_dict().items()
              if not k.endswith("num_batches_tracked")}
    params = dict(m.named_parameters())
    x = param(2, inplanes, 8, 8)
    fx.cases.append("main")
    fx.attr("", "momentum", 0.1)
    fx.attr("", "eps", 1e-5)
    fx.attr("", "stride", stride)
    out = m(x)
    R = randn(*out.shape)
    (out * R).sum().backward()
    fx.add("x", x)
    for k, v in before.items():
        fx.add(k, v)
    fx.add("R", R)
    fx.add("out", out)
    fx.add("grad.x", x.grad)
    for k, p in params.items():
        fx.add("grad." + k, p.grad)
    for k, v in m.state_dict().items():
        if "running_" in k:
            fx.add(k + ".after", v)
    return fx


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    makers = [("matmul", fx_matmul), ("linear", fx_linear),
              ("conv2d", fx_conv2d), ("batchnorm2d", fx_batchnorm2d),
              ("batchnorm1d", fx_batchnorm1d), ("layernorm", fx_layernorm),
              ("relu", fx_relu), ("gelu", fx_gelu),
              ("maxpool2d", lambda: fx_pool("maxpool2d")),
              ("avgpool2d", lambda: fx_pool("avgpool2d")),
              ("global_avgpool", fx_global_avgpool), ("add", fx_add),
              ("embedding", fx_embedding), ("softmax", fx_softmax),
              ("attention", fx_attention),
              ("cross_entropy", fx_cross_entropy),
              ("transpose", fx_transpose), ("split_concat", fx_split_concat),
              ("optimizer", fx_optimizer),
              ("transformer_block", fx_transformer_block),
              ("resnet_bottleneck", fx_resnet_bottleneck)]
    total = 0
    for name, make in makers:
        # One seed per fixture, so adding a fixture changes no other file.
        torch.manual_seed(zlib.crc32(name.encode()))
        fx = make()
        assert fx.name == name, (fx.name, name)
        path = fx.write()
        size = os.path.getsize(path)
        total += size
        print("%-48s %8d bytes" % (os.path.relpath(path, ROOT), size))
    print("total %d bytes" % total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
