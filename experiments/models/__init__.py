"""Example workloads to place on the roofline: nothing to download, random weights and inputs
(torch's standard modules one by one: experiments/models/modules.py).

The convention (experiments/placement/ reads it): a *factory* is a function whose name starts with
`make_` (or that has the attribute `rooflab_factory = True`), called as

    make_xxx(batch, dtype, device, generator, **kwargs) -> (fn, args)

It builds random inputs and weights on `device` in the torch `dtype` with `generator` (never zeros)
and returns the callable and the tuple of arguments one call takes; `fn(*args)` is what is timed.
Return `fn` as an nn.Module (or a functools.partial / closure over one) so its parameters are
counted as bytes the call must read. `kwargs` come from config/config.yaml (`workloads.<name>.
<device kind>.kwargs`); each factory picks sizes for the device kind when a key is not given
(tiny on a CPU, serving-sized on a GPU).
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def _pick(device, kwargs: dict, cpu: dict, cuda: dict) -> dict:
    """The factory's sizes: the device kind's defaults, overridden by the config's kwargs."""
    unknown = set(kwargs) - set(cpu)
    if unknown:
        raise TypeError(f"unknown keyword(s) {sorted(unknown)}; allowed: {sorted(cpu)}")
    return (cuda if torch.device(device).type == "cuda" else cpu) | kwargs


def _randn(shape, dtype, device, generator, scale=1.0):
    # drawn in float32 then cast: torch's CPU generator has no randn for every half dtype
    return (torch.randn(shape, device=device, generator=generator) * scale).to(dtype)


def on_device(factory):
    """Run a factory with `device` as torch's default device: its modules are built there, so
    torch's default initialisation (which _init draws over) runs on the device, not on one CPU
    thread and then copied (0.8 s for the GPU MLP's 134 M weights, paid by every build of every
    point). The tensors it draws name their device already. Only the shipped factories run so
    (placement/target.build does not impose it): a user's factory may draw its own CPU tensors,
    which a default device would move. A user's factory may take it too: @on_device."""
    @functools.wraps(factory)
    def built_there(batch, dtype, device, generator, **kwargs):
        with torch.device(device):
            return factory(batch, dtype, device, generator, **kwargs)
    return built_there


def _init(module: nn.Module, generator) -> nn.Module:
    """Random weights from `generator` (reproducible), scaled 1/sqrt(fan-in) so activations stay
    near unit size and half precision stays in range."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            r = torch.randn(p.shape, device=p.device, generator=generator)
            if p.dim() == 1:  # norm gains near 1, biases near 0
                p.copy_(1 + 0.1 * r if name.endswith("weight") else 0.1 * r)
            else:  # fan-in: every dimension but the first (conv: in x kh x kw)
                p.copy_(r / math.sqrt(p[0].numel()))
    return module.eval()


@on_device
def make_mlp(batch, dtype, device, generator, **kwargs):
    """Transformer MLP block: Linear(d, hidden) -> GELU -> Linear(hidden, d) on x [batch, d].
    FLOPs 2 b d hidden x 2 for the GEMMs (their bias adds fused in addmm are not counted) + b
    hidden for the GELU (docs/placement.md)."""
    k = _pick(device, kwargs, cpu={"d_model": 64, "hidden": 256},
              cuda={"d_model": 4096, "hidden": 16384})
    mlp = nn.Sequential(nn.Linear(k["d_model"], k["hidden"]), nn.GELU(),
                        nn.Linear(k["hidden"], k["d_model"])).to(device=device)
    mlp = _init(mlp, generator).to(dtype)
    return mlp, (_randn((batch, k["d_model"]), dtype, device, generator),)


@on_device
def make_conv2d(batch, dtype, device, generator, **kwargs):
    """3x3 convolution, padding 1, on x [batch, c_in, size, size]: FLOPs 2 b c_out size^2 c_in 9
    (`kernel`, `groups` and `stride` other than 3, 1 and 1: padding kernel // 2, FLOPs over
    groups and stride^2)."""
    k = _pick(device, kwargs, cpu={"c_in": 16, "c_out": 16, "size": 16, "kernel": 3, "groups": 1,
                                   "stride": 1},
              cuda={"c_in": 256, "c_out": 256, "size": 56, "kernel": 3, "groups": 1, "stride": 1})
    conv = nn.Conv2d(k["c_in"], k["c_out"], k["kernel"], stride=k["stride"],
                     padding=k["kernel"] // 2, groups=k["groups"])
    conv = _init(conv.to(device), generator).to(dtype)
    x = _randn((batch, k["c_in"], k["size"], k["size"]), dtype, device, generator)
    return conv, (x,)


@on_device
def make_attention_prefill(batch, dtype, device, generator, **kwargs):
    """Causal scaled-dot-product attention over a prompt: q, k, v [batch, heads, seq, head_dim]."""
    k = _pick(device, kwargs, cpu={"heads": 4, "seq": 64, "head_dim": 32},
              cuda={"heads": 32, "seq": 2048, "head_dim": 128})
    shape = (batch, k["heads"], k["seq"], k["head_dim"])
    q, kk, v = (_randn(shape, dtype, device, generator) for _ in range(3))
    return functools.partial(F.scaled_dot_product_attention, is_causal=True), (q, kk, v)


@on_device
def make_attention_decode(batch, dtype, device, generator, **kwargs):
    """One new token per sequence attending over a KV cache: q [batch, heads, 1, head_dim],
    k, v [batch, heads, context, head_dim]. Reads the whole cache for ~4 FLOPs per element."""
    k = _pick(device, kwargs, cpu={"heads": 4, "context": 256, "head_dim": 32},
              cuda={"heads": 32, "context": 4096, "head_dim": 128})
    q = _randn((batch, k["heads"], 1, k["head_dim"]), dtype, device, generator)
    cache = (batch, k["heads"], k["context"], k["head_dim"])
    kk, v = (_randn(cache, dtype, device, generator) for _ in range(2))
    return F.scaled_dot_product_attention, (q, kk, v)


class DecoderLayer(nn.Module):
    def __init__(self, d: int, heads: int, hidden: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.up, self.down = nn.Linear(d, hidden, bias=False), nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(
            2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Decoder(nn.Module):
    """A decoder-only transformer (GPT-like, pre-norm) built from a dict config:
    {vocab, d_model, heads, layers, hidden, seq}. Forward: token ids [b, seq] -> logits."""

    def __init__(self, config: dict):
        super().__init__()
        d = config["d_model"]
        if d % config["heads"]:
            raise ValueError(f"d_model={d} must be a multiple of heads={config['heads']}")
        self.embed = nn.Embedding(config["vocab"], d)
        self.layers = nn.ModuleList(DecoderLayer(d, config["heads"], config["hidden"])
                                    for _ in range(config["layers"]))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, config["vocab"], bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


TRANSFORMER = {
    "cpu": {"vocab": 512, "d_model": 64, "heads": 4, "layers": 2, "hidden": 256, "seq": 32},
    "cuda": {"vocab": 8192, "d_model": 1024, "heads": 8, "layers": 4, "hidden": 4096, "seq": 128},
}


@on_device
def make_transformer(batch, dtype, device, generator, **kwargs):
    """A small decoder-only transformer in prefill: `batch` prompts of `seq` tokens -> logits."""
    config = _pick(device, kwargs, cpu=TRANSFORMER["cpu"], cuda=TRANSFORMER["cuda"])
    model = _init(Decoder(config).to(device), generator).to(dtype)
    tokens = torch.randint(0, config["vocab"], (batch, config["seq"]), device=device,
                           generator=generator)
    return model, (tokens,)
