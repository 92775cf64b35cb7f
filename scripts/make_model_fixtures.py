#!/usr/bin/python3
"""Writes the PyTorch reference fixtures of the built-in models
(tests/test_model_zoo.c) into tests/fixtures/models/, and prints the
parameter counts the test hard-codes.

Run with Debian's Python, which has torch (and torchvision, package
python3-torchvision, used to check the ResNet module below):

    /usr/bin/python3 scripts/make_model_fixtures.py           # fixtures
    /usr/bin/python3 scripts/make_model_fixtures.py --counts  # counts only

Hugging Face transformers is not needed: GPT2LMHeadModel and
BertForMaskedLM are written out below as minimal modules with exactly HF's
parameter names and layouts (Conv1D weights (in, out) for GPT-2, nn.Linear
(out, in) for BERT). Tied aliases HF also lists in a state dict
(lm_head.weight, cls.predictions.decoder.{weight,bias}) and non-parameter
buffers (attn.bias, position_ids, num_batches_tracked) are left out, as
safetensors checkpoints leave them out.

One file per model, a tiny configuration each, dropout 0:

    <name>               every parameter and batch-norm running stat, with
                         the names delta's model uses (before the step)
    input.<name>         the model's inputs: input.images / input.labels,
                         input.tokens / input.targets / input.attention_mask
    logits, loss         the expected logits and mean cross-entropy
    grad.<name>          the expected gradient of a parameter (every one,
                         except the largest ResNet conv weights)
    <stat>.after         running stats after the training-mode forward

"__metadata__" holds the model name and the config (batch, image_size,
hidden, ...) under the field names of delta_model_config, "gelu" (tanh or
erf, BERT) and the generator. Parameters are drawn in float32 (seeded per
file, so every run writes the same bytes), the reference is computed in
float64 from exactly those values, and results are rounded once to float32.
"""
import copy
import math
import os
import re
import sys
import zlib

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    sys.exit("make_model_fixtures.py needs PyTorch: run it with Debian's "
             "Python, /usr/bin/python3 (package python3-torch)")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import write_safetensors  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "models")
REF = torch.float64


def graph_has_gelu_erf():
    """BERT's GELU is the erf form; delta's BERT uses it once graph.h has
    delta_gelu_erf, and the fixture follows what delta can match."""
    with open(os.path.join(ROOT, "include", "delta", "graph.h")) as f:
        return re.search(r"\bdelta_gelu_erf\s*\(", f.read()) is not None


# ---- reference modules: MLP ----------------------------------------------

class MLP(nn.Module):
    def __init__(self, in_features, hidden, classes, device=None):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden, device=device)
        self.fc2 = nn.Linear(hidden, hidden, device=device)
        self.fc3 = nn.Linear(hidden, classes, device=device)

    def forward(self, x):
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


# ---- reference modules: ResNet (torchvision's, with a width) --------------

class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride, downsample):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        idt = x if self.downsample is None else self.downsample(x)
        return F.relu(out + idt)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride, downsample):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.downsample = downsample

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        idt = x if self.downsample is None else self.downsample(x)
        return F.relu(out + idt)


class ResNet(nn.Module):
    """torchvision.models.ResNet with the base width as a parameter
    (torchvision fixes it at 64); same module names."""

    def __init__(self, block, layers, classes=1000, width=64, channels=3):
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(channels, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._layer(block, width, layers[0], 1)
        self.layer2 = self._layer(block, 2 * width, layers[1], 2)
        self.layer3 = self._layer(block, 4 * width, layers[2], 2)
        self.layer4 = self._layer(block, 8 * width, layers[3], 2)
        self.fc = nn.Linear(8 * width * block.expansion, classes)

    def _layer(self, block, planes, n, stride):
        ds = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            ds = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride,
                          bias=False),
                nn.BatchNorm2d(planes * block.expansion))
        blocks = [block(self.inplanes, planes, stride, ds)]
        self.inplanes = planes * block.expansion
        blocks += [block(self.inplanes, planes, 1, None) for _ in range(1, n)]
        return nn.Sequential(*blocks)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


RESNETS = {"resnet18": (BasicBlock, [2, 2, 2, 2]),
           "resnet34": (BasicBlock, [3, 4, 6, 3]),
           "resnet50": (Bottleneck, [3, 4, 6, 3]),
           "resnet101": (Bottleneck, [3, 4, 23, 3]),
           "resnet152": (Bottleneck, [3, 8, 36, 3])}


# ---- reference modules: GPT-2 (HF GPT2LMHeadModel names) ------------------

class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D: weight (in, out), y = x W + b."""

    def __init__(self, nf, nx, device=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(nx, nf, device=device))
        self.bias = nn.Parameter(torch.zeros(nf, device=device))

    def forward(self, x):
        return x @ self.weight + self.bias


class GPT2Attention(nn.Module):
    def __init__(self, C, nh, p, device):
        super().__init__()
        self.nh = nh
        self.c_attn = Conv1D(3 * C, C, device)
        self.c_proj = Conv1D(C, C, device)
        self.attn_dropout = nn.Dropout(p)
        self.resid_dropout = nn.Dropout(p)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.nh, C // self.nh).transpose(1, 2)
                   for t in (q, k, v))
        s = q @ k.transpose(-2, -1) / math.sqrt(C // self.nh)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        s = torch.where(causal, s, torch.tensor(torch.finfo(s.dtype).min,
                                                dtype=s.dtype))
        a = self.attn_dropout(torch.softmax(s, dim=-1)) @ v
        a = a.transpose(1, 2).reshape(B, T, C)
        return self.resid_dropout(self.c_proj(a))


class GPT2MLP(nn.Module):
    def __init__(self, C, p, device):
        super().__init__()
        self.c_fc = Conv1D(4 * C, C, device)
        self.c_proj = Conv1D(C, 4 * C, device)
        self.dropout = nn.Dropout(p)

    def forward(self, x):
        h = F.gelu(self.c_fc(x), approximate="tanh")
        return self.dropout(self.c_proj(h))


class GPT2Block(nn.Module):
    def __init__(self, C, nh, p, device):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5, device=device)
        self.attn = GPT2Attention(C, nh, p, device)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5, device=device)
        self.mlp = GPT2MLP(C, p, device)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, L, C, nh, V, P, p, device):
        super().__init__()
        self.wte = nn.Embedding(V, C, device=device)
        self.wpe = nn.Embedding(P, C, device=device)
        self.drop = nn.Dropout(p)
        self.h = nn.ModuleList([GPT2Block(C, nh, p, device)
                                for _ in range(L)])
        self.ln_f = nn.LayerNorm(C, eps=1e-5, device=device)

    def forward(self, tokens):
        T = tokens.shape[1]
        pos = torch.arange(T)
        x = self.drop(self.wte(tokens) + self.wpe(pos))
        for blk in self.h:
            x = blk(x)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    """lm_head is tied to transformer.wte (no tensor of its own). Targets
    are the next tokens already (delta's convention: the caller shifts)."""

    def __init__(self, L, C, nh, V, P, p=0.0, device=None):
        super().__init__()
        self.transformer = GPT2Model(L, C, nh, V, P, p, device)

    def forward(self, tokens):
        h = self.transformer(tokens)
        return h.reshape(-1, h.shape[-1]) @ self.transformer.wte.weight.t()


# ---- reference modules: BERT (HF BertForMaskedLM names) -------------------

def gelu_erf(x):
    return F.gelu(x)


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


class BertEmbeddings(nn.Module):
    def __init__(self, C, V, P, p, device):
        super().__init__()
        self.word_embeddings = nn.Embedding(V, C, padding_idx=0, device=device)
        self.position_embeddings = nn.Embedding(P, C, device=device)
        self.token_type_embeddings = nn.Embedding(2, C, device=device)
        self.LayerNorm = nn.LayerNorm(C, eps=1e-12, device=device)
        self.dropout = nn.Dropout(p)

    def forward(self, tokens):
        B, T = tokens.shape
        types = torch.zeros(B, T, dtype=torch.long)
        x = self.word_embeddings(tokens) + self.token_type_embeddings(types)
        x = x + self.position_embeddings(torch.arange(T))
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, C, nh, p, device):
        super().__init__()
        self.nh = nh
        self.query = nn.Linear(C, C, device=device)
        self.key = nn.Linear(C, C, device=device)
        self.value = nn.Linear(C, C, device=device)
        self.dropout = nn.Dropout(p)

    def forward(self, x, ext_mask):
        B, T, C = x.shape
        q, k, v = (m(x).view(B, T, self.nh, C // self.nh).transpose(1, 2)
                   for m in (self.query, self.key, self.value))
        s = q @ k.transpose(-2, -1) / math.sqrt(C // self.nh) + ext_mask
        a = self.dropout(torch.softmax(s, dim=-1)) @ v
        return a.transpose(1, 2).reshape(B, T, C)


class BertSelfOutput(nn.Module):
    def __init__(self, C, p, device):
        super().__init__()
        self.dense = nn.Linear(C, C, device=device)
        self.LayerNorm = nn.LayerNorm(C, eps=1e-12, device=device)
        self.dropout = nn.Dropout(p)

    def forward(self, h, x):
        return self.LayerNorm(self.dropout(self.dense(h)) + x)


class BertAttention(nn.Module):
    def __init__(self, C, nh, p, device):
        super().__init__()
        self.self = BertSelfAttention(C, nh, p, device)
        self.output = BertSelfOutput(C, p, device)

    def forward(self, x, ext_mask):
        return self.output(self.self(x, ext_mask), x)


class BertIntermediate(nn.Module):
    def __init__(self, C, act, device):
        super().__init__()
        self.dense = nn.Linear(C, 4 * C, device=device)
        self.act = act

    def forward(self, x):
        return self.act(self.dense(x))


class BertOutput(nn.Module):
    def __init__(self, C, p, device):
        super().__init__()
        self.dense = nn.Linear(4 * C, C, device=device)
        self.LayerNorm = nn.LayerNorm(C, eps=1e-12, device=device)
        self.dropout = nn.Dropout(p)

    def forward(self, h, x):
        return self.LayerNorm(self.dropout(self.dense(h)) + x)


class BertLayer(nn.Module):
    def __init__(self, C, nh, p, act, device):
        super().__init__()
        self.attention = BertAttention(C, nh, p, device)
        self.intermediate = BertIntermediate(C, act, device)
        self.output = BertOutput(C, p, device)

    def forward(self, x, ext_mask):
        a = self.attention(x, ext_mask)
        return self.output(self.intermediate(a), a)


class BertEncoder(nn.Module):
    def __init__(self, L, C, nh, p, act, device):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(C, nh, p, act, device)
                                    for _ in range(L)])

    def forward(self, x, ext_mask):
        for lay in self.layer:
            x = lay(x, ext_mask)
        return x


class BertModel(nn.Module):
    """BertModel(add_pooling_layer=False), as BertForMaskedLM builds it."""

    def __init__(self, L, C, nh, V, P, p, act, device):
        super().__init__()
        self.embeddings = BertEmbeddings(C, V, P, p, device)
        self.encoder = BertEncoder(L, C, nh, p, act, device)

    def forward(self, tokens, mask):
        ext = (1.0 - mask[:, None, None, :]) * torch.finfo(mask.dtype).min
        return self.encoder(self.embeddings(tokens), ext)


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, C, act, device):
        super().__init__()
        self.dense = nn.Linear(C, C, device=device)
        self.act = act
        self.LayerNorm = nn.LayerNorm(C, eps=1e-12, device=device)

    def forward(self, x):
        # layer norm in its weights' dtype: a no-op in float64; under
        # autocast it is the fp32 rule newer PyTorch applies itself
        # (1.13's CPU autocast would hand it a bfloat16 input)
        h = self.act(self.dense(x))
        return self.LayerNorm(h.to(self.LayerNorm.weight.dtype))


class BertLMPredictionHead(nn.Module):
    """decoder: weight tied to the word embeddings, bias is self.bias."""

    def __init__(self, C, V, act, device):
        super().__init__()
        self.transform = BertPredictionHeadTransform(C, act, device)
        self.bias = nn.Parameter(torch.zeros(V, device=device))

    def forward(self, x, word_embeddings):
        return F.linear(self.transform(x), word_embeddings, self.bias)


class BertOnlyMLMHead(nn.Module):
    def __init__(self, C, V, act, device):
        super().__init__()
        self.predictions = BertLMPredictionHead(C, V, act, device)


class BertForMaskedLM(nn.Module):
    def __init__(self, L, C, nh, V, P, p=0.0, act=gelu_erf, device=None):
        super().__init__()
        self.bert = BertModel(L, C, nh, V, P, p, act, device)
        self.cls = BertOnlyMLMHead(C, V, act, device)

    def forward(self, tokens, mask):
        h = self.bert(tokens, mask)
        w = self.bert.embeddings.word_embeddings.weight
        logits = self.cls.predictions(h, w)
        return logits.reshape(-1, logits.shape[-1])


# ---- parameter counts ------------------------------------------------------

GPT2S = {"gpt2-tiny": (2, 64, 2, 256), "gpt2-small": (12, 768, 12, 50257),
         "gpt2-medium": (24, 1024, 16, 50257),
         "gpt2-large": (36, 1280, 20, 50257),
         "gpt2-xl": (48, 1600, 25, 50257)}
BERTS = {"bert-tiny": (2, 128, 2, 256), "bert-base": (12, 768, 12, 30522),
         "bert-large": (24, 1024, 16, 30522)}


def n_params(m):
    return sum(p.numel() for p in m.parameters())  # tied ones once


def counts():
    """Parameter counts of every built-in model at its defaults, from the
    reference modules (on the meta device: no memory), cross-checked with
    torchvision where it is installed."""
    meta = torch.device("meta")
    out = {"mlp": n_params(MLP(28 * 28, 256, 10, device=meta))}
    try:
        import torchvision
    except ImportError:
        torchvision = None
    for name, (block, layers) in RESNETS.items():
        m = ResNet(block, layers)
        out[name] = n_params(m)
        if torchvision is not None:
            tv = getattr(torchvision.models, name)()
            assert n_params(tv) == out[name], name
            mine = {k: tuple(v.shape) for k, v in m.state_dict().items()}
            theirs = {k: tuple(v.shape) for k, v in tv.state_dict().items()}
            assert mine == theirs, name
    for name, (L, C, nh, V) in GPT2S.items():
        out[name] = n_params(GPT2LMHeadModel(L, C, nh, V, 1024, device=meta))
    for name, (L, C, nh, V) in BERTS.items():
        out[name] = n_params(BertForMaskedLM(L, C, nh, V, 512, device=meta))
    return out, torchvision is not None


# ---- fixtures ----------------------------------------------------------------

def randn(*shape, scale=1.0, shift=0.0):
    """Drawn in float32 (so the stored value is exact)."""
    return torch.randn(tuple(shape), dtype=torch.float32) * scale + shift


def fill_params(model):
    """Replaces every parameter and running stat with float32 draws that
    exercise the model: fan-in scaled weights, norms near (1, 0), running
    stats away from their defaults."""
    with torch.no_grad():
        for _, mod in model.named_modules():
            for pn, p in mod.named_parameters(recurse=False):
                if isinstance(mod, nn.Conv2d):
                    fan_in = p.shape[1] * p.shape[2] * p.shape[3]
                    v = randn(*p.shape, scale=math.sqrt(2.0 / fan_in))
                elif isinstance(mod, (nn.BatchNorm2d, nn.LayerNorm)):
                    v = (randn(*p.shape, scale=0.2, shift=1.0)
                         if pn == "weight" else randn(*p.shape, scale=0.1))
                elif isinstance(mod, nn.Embedding):
                    v = randn(*p.shape, scale=0.5)
                elif pn == "weight" and isinstance(mod, nn.Linear):
                    v = randn(*p.shape, scale=1.0 / math.sqrt(p.shape[1]))
                elif pn == "weight" and isinstance(mod, Conv1D):
                    v = randn(*p.shape, scale=1.0 / math.sqrt(p.shape[0]))
                else:  # biases
                    v = randn(*p.shape, scale=0.1)
                p.copy_(v)
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.copy_(randn(*mod.running_mean.shape,
                                             scale=0.2))
                mod.running_var.copy_(torch.rand(mod.running_var.shape) + 0.5)


def state(model):
    """Parameters and running stats by name (no num_batches_tracked)."""
    return [(k, v.detach().clone()) for k, v in model.state_dict().items()
            if not k.endswith("num_batches_tracked")]


def fixture(name, cfg, model, inputs, forward, targets, grad_max=None,
            extra_meta=None):
    """Runs one training-mode forward and backward of model (float64) on
    inputs (list of (name, tensor) in float32/int32) and writes
    tests/fixtures/models/<name>.safetensors. grad_max: store only the
    gradients of parameters with at most this many elements."""
    # PyTorch's mixed precision on the same weights and inputs: the float32
    # model under CPU autocast to bfloat16 (float32 masters and gradients),
    # what delta --precision bf16 is set against (tests/test_model_zoo.c)
    m16 = copy.deepcopy(model).float().train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits16 = forward(m16, torch.float32)
        loss16 = F.cross_entropy(logits16.float(), targets.long(),
                                 ignore_index=-100)
    loss16.backward()
    model = model.to(REF).train()
    before = state(model)
    logits = forward(model, REF)
    loss = F.cross_entropy(logits, targets.long(), ignore_index=-100)
    loss.backward()
    tensors = list(before)
    tensors += [("input." + k, v) for k, v in inputs]
    tensors += [("logits", logits), ("loss", loss)]
    skipped = []
    for k, p in model.named_parameters():
        assert p.grad is not None, k
        if grad_max is not None and p.numel() > grad_max:
            skipped.append(k)
            continue
        tensors.append(("grad." + k, p.grad))
    for k, v in model.state_dict().items():
        if "running_" in k:
            tensors.append((k + ".after", v))
    tensors += [("bf16.logits", logits16.float()), ("bf16.loss", loss16)]
    grads16 = dict(m16.named_parameters())
    tensors += [("bf16.grad." + k, grads16[k].grad)
                for k, _ in model.named_parameters() if k not in skipped]
    meta = {"model": cfg["name"],
            "description": "PyTorch reference of delta model %s: one "
                           "training-mode step, mean cross-entropy"
                           % cfg["name"],
            "generator": "scripts/make_model_fixtures.py (torch %s)"
                         % torch.__version__,
            "reference": "computed in float64, stored as float32; bf16.*: "
                         "torch.autocast('cpu', bfloat16) on the float32 "
                         "model",
            "grads_left_out": ",".join(skipped)}
    meta.update({k: v for k, v in cfg.items() if k != "name"})
    meta.update(extra_meta or {})
    path = os.path.join(OUT_DIR, name + ".safetensors")
    write_safetensors(path, tensors, meta)
    return path


def fx_mlp():
    cfg = {"name": "mlp", "batch": 4, "image_size": 8, "channels": 1,
           "classes": 10, "mlp_hidden": 32}
    m = MLP(64, 32, 10)
    fill_params(m)
    x = randn(4, 1, 8, 8)
    y = torch.tensor([3, 0, 9, 3], dtype=torch.int32)
    return fixture("mlp", cfg, m, [("images", x), ("labels", y)],
                   lambda m, dt: m(x.to(dt)), y)


def resnet_fixture(fname, name, batch, size, width):
    cfg = {"name": name, "batch": batch, "image_size": size, "channels": 3,
           "classes": 10, "width": width}
    block, layers = RESNETS[name]
    m = ResNet(block, layers, classes=10, width=width)
    fill_params(m)
    # The last batch norm of every residual branch gets weights near 0.2
    # (torchvision's zero_init_residual sets them to 0). With weights near
    # 1, a deep random ResNet on tiny maps is so ill-conditioned that
    # PyTorch's own float32 gradients miss its float64 ones by up to 1000x
    # the test's tolerance; damped, they stay well inside it.
    last = "bn3.weight" if block is Bottleneck else "bn2.weight"
    with torch.no_grad():
        for k, p in m.named_parameters():
            if k.startswith("layer") and k.endswith(last):
                p.copy_(randn(*p.shape, scale=0.04, shift=0.2))
    x = randn(batch, 3, size, size)
    y = torch.randint(0, 10, (batch,), dtype=torch.int32)
    # The largest conv weights' gradients are left out to keep the folder
    # small; every other parameter's (and the loss, logits, stats) is kept.
    return fixture(fname, cfg, m, [("images", x), ("labels", y)],
                   lambda m, dt: m(x.to(dt)), y, grad_max=10000)


def fx_resnet18():
    return resnet_fixture("resnet18", "resnet18", 2, 32, 8)


def fx_resnet50():
    return resnet_fixture("resnet50", "resnet50", 4, 64, 4)


def fx_gpt2():
    B, T, L, C, nh, V, P = 2, 8, 2, 32, 2, 64, 16
    cfg = {"name": "gpt2-tiny", "batch": B, "layers": L, "hidden": C,
           "heads": nh, "seq_len": T, "vocab": V, "positions": P,
           "dropout": 0}
    m = GPT2LMHeadModel(L, C, nh, V, P)
    fill_params(m)
    tokens = torch.randint(0, V, (B, T), dtype=torch.int32)
    targets = torch.randint(0, V, (B, T), dtype=torch.int32)
    targets[0, 3] = -100
    targets[1, 7] = -100
    return fixture("gpt2", cfg, m, [("tokens", tokens), ("targets", targets)],
                   lambda m, dt: m(tokens.long()), targets.reshape(-1))


def fx_bert():
    B, T, L, C, nh, V, P = 2, 8, 2, 32, 2, 64, 16
    erf = graph_has_gelu_erf()
    cfg = {"name": "bert-tiny", "batch": B, "layers": L, "hidden": C,
           "heads": nh, "seq_len": T, "vocab": V, "positions": P,
           "dropout": 0}
    m = BertForMaskedLM(L, C, nh, V, P, act=gelu_erf if erf else gelu_tanh)
    fill_params(m)
    # Entry 1 is padded after 5 tokens: padding is token 0 ([PAD]), masked
    # out of attention and never a target; every other id is drawn from
    # [1, V) so only padding looks up row 0 (HF's padding_idx).
    mask = torch.ones(B, T, dtype=torch.float32)
    mask[1, 5:] = 0
    tokens = torch.randint(1, V, (B, T), dtype=torch.int32)
    tokens[1, 5:] = 0
    targets = torch.full((B, T), -100, dtype=torch.int32)
    for b, t in [(0, 1), (0, 4), (0, 6), (1, 0), (1, 3)]:
        targets[b, t] = int(torch.randint(1, V, (1,)))
    return fixture("bert", cfg, m,
                   [("tokens", tokens), ("targets", targets),
                    ("attention_mask", mask)],
                   lambda m, dt: m(tokens.long(), mask.to(dt)),
                   targets.reshape(-1),
                   extra_meta={"gelu": "erf" if erf else "tanh"})


def main():
    if "--counts" not in sys.argv[1:]:
        os.makedirs(OUT_DIR, exist_ok=True)
        total = 0
        for name, make in [("mlp", fx_mlp), ("resnet18", fx_resnet18),
                           ("resnet50", fx_resnet50), ("gpt2", fx_gpt2),
                           ("bert", fx_bert)]:
            torch.manual_seed(zlib.crc32(("model-" + name).encode()))
            path = make()
            size = os.path.getsize(path)
            total += size
            print("%-44s %9d bytes" % (os.path.relpath(path, ROOT), size))
        print("total %d bytes" % total)
    c, checked = counts()
    print("parameter counts (tied weights once)%s:"
          % (", ResNets checked against torchvision" if checked else ""))
    for k, v in c.items():
        print("  %-12s %14d" % (k, v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
