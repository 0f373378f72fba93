"""Held-out workloads: standard torch module configurations drawn at random from a seed, for
validating the op model out of sample (`rooflab validate`, docs/placement.md "Out of sample").

draw(seed, count, device_kind) gives `count` specs, each a dict {kind, batch, <sizes>}: kinds
round-robin over KINDS (so every class is drawn), widths 128-4096 (channels, model and hidden
widths, heads x head dimension, table dimensions) on a grid of multiples of 32, batches 1-64, the
other sizes (sequence, length, spatial) from modest ranges, redrawn until the call's estimated
FLOPs and bytes fit the device kind's BUDGET. A draw equal to a calibration point of the
op_rates experiment (a module factory's own sizes at one of its calibration batches) is redrawn:
none of them is ever judged. make_heldout(batch, dtype, device, generator, **spec) builds one.

The seed is a config value (config/config.yaml `validate.seed`): change it before reading the
results, so that nothing was tuned on the draws that judge it.
"""

from __future__ import annotations

import functools
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

from experiments.models import _init, _randn, on_device

KINDS = ("linear", "conv1d", "conv2d", "conv_transpose2d", "layer_norm", "gelu", "softmax",
         "lstm", "gru", "mha", "sdpa", "embedding_bag", "encoder_layer")
WIDTHS = (128, 4096)
BATCHES = (1, 64)
# per call at most (estimated FLOPs, bytes): a 2-core CPU in float32 takes ~10 ms at its limit,
# a GPU ~1 ms; larger draws are redrawn
BUDGET = {"cpu": (4e8, 64e6), "cuda": (4e11, 2e9)}
TRIES = 500


class DrawError(ValueError):
    pass


def _log_int(rng: random.Random, lo: int, hi: int, step: int = 1) -> int:
    """An integer log-uniform in [lo, hi], a multiple of `step` (lo and hi are)."""
    v = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    return int(min(hi, max(lo, round(v / step) * step)))


def _width(rng) -> int:
    return _log_int(rng, *WIDTHS, step=32)


def _spec(rng: random.Random, kind: str) -> dict:
    """One configuration of `kind` (sizes only; the batch is drawn by the caller)."""
    if kind == "linear":
        return {"d_in": _width(rng), "d_out": _width(rng), "seq": rng.choice([1, 1, 16, 128])}
    if kind in ("conv1d", "conv2d"):
        c_in, c_out = _width(rng), _width(rng)
        groups = rng.choice([1, 1, 2, 4, "depthwise"])
        if groups == "depthwise":
            c_out, groups = c_in, c_in
        size = _log_int(rng, 16, 1024) if kind == "conv1d" else _log_int(rng, 4, 64)
        return {"c_in": c_in, "c_out": c_out, "kernel": rng.choice([1, 3, 3, 5]),
                "stride": rng.choice([1, 1, 2]), "groups": groups, "size": size}
    if kind == "conv_transpose2d":
        return {"c_in": _width(rng), "c_out": _width(rng), "kernel": rng.choice([2, 4]),
                "size": _log_int(rng, 4, 32)}
    if kind in ("layer_norm", "gelu", "softmax"):
        return {"rows": _log_int(rng, 1, 512), "width": _width(rng)}
    if kind in ("lstm", "gru"):
        return {"d": _width(rng), "hidden": _log_int(rng, 128, 2048, step=32),
                "layers": rng.choice([1, 2]), "seq": _log_int(rng, 4, 128)}
    if kind in ("mha", "encoder_layer", "sdpa"):
        head_dim = rng.choice([32, 64, 64, 128] if kind != "sdpa" else [32, 64, 80, 96, 128])
        heads = max(1, _width(rng) // head_dim)
        out = {"heads": heads, "head_dim": head_dim, "seq": _log_int(rng, 8, 1024)}
        if kind == "encoder_layer":
            out["ff"] = heads * head_dim * rng.choice([2, 4])
        if kind == "sdpa":
            out["causal"] = rng.random() < 0.5
        return out
    if kind == "embedding_bag":
        return {"rows": _log_int(rng, 1000, 1 << 20), "dim": _width(rng),
                "bag": _log_int(rng, 1, 64), "mode": rng.choice(["sum", "mean"])}
    raise DrawError(f"unknown kind {kind!r}; allowed: {list(KINDS)}")


def estimate(spec: dict, itemsize: int = 4) -> tuple[float, float]:
    """(FLOPs, bytes) of one call, roughly (the budget's check, never a measurement's)."""
    k, b = spec["kind"], spec["batch"]
    if k == "linear":
        t = b * spec["seq"]
        return 2.0 * t * spec["d_in"] * spec["d_out"], itemsize * (
            spec["d_in"] * spec["d_out"] + t * (spec["d_in"] + spec["d_out"]))
    if k in ("conv1d", "conv2d", "conv_transpose2d"):
        dims = 1 if k == "conv1d" else 2
        cin, cout, ker, size = spec["c_in"], spec["c_out"], spec["kernel"], spec["size"]
        groups = spec.get("groups", 1)
        out = (size * 2 if k == "conv_transpose2d" else size // spec.get("stride", 1)) ** dims
        weight = cin * cout * ker ** dims / groups
        return 2.0 * b * out * weight, itemsize * (weight + b * (cin * size ** dims + cout * out))
    if k in ("layer_norm", "gelu", "softmax"):
        n = b * spec["rows"] * spec["width"]
        return 8.0 * n, 2.0 * itemsize * n
    if k in ("lstm", "gru"):
        g = 4 if k == "lstm" else 3
        h, d = spec["hidden"], spec["d"]
        w = g * h * (d + h) + (spec["layers"] - 1) * g * h * 2 * h
        return 2.0 * b * spec["seq"] * w, itemsize * (w + b * spec["seq"] * (d + h))
    if k in ("mha", "encoder_layer", "sdpa"):
        d, s = spec["heads"] * spec["head_dim"], spec["seq"]
        attn = 4.0 * b * s * s * d
        if k == "sdpa":
            return attn, itemsize * 4 * b * s * d
        weights = 4 * d * d + (2 * d * spec["ff"] if k == "encoder_layer" else 0)
        return attn + 2.0 * b * s * weights, itemsize * (weights + 6 * b * s * d)
    if k == "embedding_bag":
        # the table counts: it is resident, and a large one is a long factory
        return float(b * spec["bag"] * spec["dim"]), itemsize * spec["dim"] * (
            spec["rows"] + b * (spec["bag"] + 1))
    raise DrawError(f"unknown kind {k!r}; allowed: {list(KINDS)}")


# the op_rates experiment's module factories, as held-out specs (experiments/models/modules.py
# and experiments/models's defaults): a draw equal to one at a calibration batch is redrawn
def calibration_specs(device_kind: str, batches: dict, shapes=()) -> list[dict]:
    """The op_rates calibration points expressible as specs: `batches` maps an op_rates module
    name to its calibration batches (config/config.yaml's op_rates for the device kind);
    `shapes`, (module, keywords) of more calibration shapes (op_rates `shapes`, validate's
    `calibrate`), each at its own `batch` or its module's batches: those of sdpa are specs
    too."""
    gpu = device_kind == "cuda"
    forms = {
        "conv1d": {"kind": "conv1d", "c_in": 512 if gpu else 16, "c_out": 512 if gpu else 16,
                   "kernel": 3, "stride": 1, "groups": 1, "size": 4096 if gpu else 64},
        "conv2d": {"kind": "conv2d", "c_in": 256 if gpu else 16, "c_out": 256 if gpu else 16,
                   "kernel": 3, "stride": 1, "groups": 1, "size": 56 if gpu else 16},
        "layer_norm": {"kind": "layer_norm", "rows": 512 if gpu else 16,
                       "width": 4096 if gpu else 64},
        "gelu": {"kind": "gelu", "rows": 512 if gpu else 16, "width": 16384 if gpu else 256},
        "sdpa": {"kind": "sdpa", "heads": 16 if gpu else 2, "head_dim": 64 if gpu else 16,
                 "seq": 1024 if gpu else 64, "causal": True},
        "attention_prefill": {"kind": "sdpa", "heads": 32 if gpu else 4,
                              "head_dim": 128 if gpu else 32, "seq": 2048 if gpu else 64,
                              "causal": True},
    }
    more = [{"kind": "sdpa", "heads": kw["heads"], "head_dim": kw["head_dim"],
             "seq": kw["seq"], "causal": kw.get("causal", True)} | {"batch": int(b)}
            for name, kw in shapes if name == "sdpa" and {"heads", "head_dim", "seq"} <= set(kw)
            for b in ([kw["batch"]] if "batch" in kw else batches.get(name, ()))]
    return [forms[name] | {"batch": int(b)} for name, bs in batches.items() if name in forms
            for b in bs] + more


def draw(seed: int, count: int, device_kind: str, calibration=()) -> list[dict]:
    """`count` specs (module docstring) from `seed`, for `device_kind` ("cpu" or "cuda"), none
    equal to a spec of `calibration` (calibration_specs)."""
    if device_kind not in BUDGET:
        raise DrawError(f"device kind {device_kind!r}: give one of {sorted(BUDGET)}")
    if not isinstance(count, int) or count < 1:
        raise DrawError(f"count={count!r} must be an integer >= 1")
    rng, (max_flops, max_bytes) = random.Random(f"{seed}/{device_kind}"), BUDGET[device_kind]
    taken = [dict(c) for c in calibration]
    out = []
    for i in range(count):
        kind = KINDS[i % len(KINDS)]
        for _ in range(TRIES):
            spec = {"kind": kind, "batch": _log_int(rng, *BATCHES)} | _spec(rng, kind)
            flops, nbytes = estimate(spec)
            if flops <= max_flops and nbytes <= max_bytes and spec not in taken + out:
                break
        else:
            raise DrawError(f"no {kind} spec within {device_kind}'s budget in {TRIES} draws")
        out.append(spec)
    return out


def name(spec: dict) -> str:
    """A spec's workload name: its kind and sizes, e.g. linear-b8-d_in512-d_out1024-seq1."""
    sizes = "-".join(f"{k}{v}" for k, v in spec.items() if k not in ("kind", "batch"))
    return f"{spec['kind']}-b{spec['batch']}-{sizes}".replace("True", "T").replace("False", "F")


def _module(kind: str, s: dict) -> tuple[nn.Module, tuple]:
    """The module and the input shape a spec builds (sizes as _spec draws them)."""
    if kind == "linear":
        return nn.Linear(s["d_in"], s["d_out"]), (s["seq"], s["d_in"])
    if kind in ("conv1d", "conv2d"):
        conv = nn.Conv1d if kind == "conv1d" else nn.Conv2d
        shape = (s["c_in"],) + (s["size"],) * (1 if kind == "conv1d" else 2)
        return conv(s["c_in"], s["c_out"], s["kernel"], stride=s["stride"],
                    padding=s["kernel"] // 2, groups=s["groups"]), shape
    if kind == "conv_transpose2d":
        return nn.ConvTranspose2d(s["c_in"], s["c_out"], s["kernel"], stride=2,
                                  padding=s["kernel"] // 2 - 1), (s["c_in"], s["size"], s["size"])
    if kind == "layer_norm":
        return nn.LayerNorm(s["width"]), (s["rows"], s["width"])
    if kind in ("gelu", "softmax"):
        return (nn.GELU() if kind == "gelu" else nn.Softmax(dim=-1)), (s["rows"], s["width"])
    d = s.get("heads", 1) * s.get("head_dim", 1)
    if kind == "encoder_layer":
        return nn.TransformerEncoderLayer(d, s["heads"], s["ff"], dropout=0.0,
                                          batch_first=True), (s["seq"], d)
    raise DrawError(f"unknown kind {kind!r}; allowed: {list(KINDS)}")


@on_device
def make_heldout(batch, dtype, device, generator, kind: str = "linear", **sizes):
    """One drawn spec (draw()'s sizes as keywords) at `batch`: its module (eval mode, random
    weights) and inputs."""
    s = sizes
    if kind in ("lstm", "gru"):
        cls = nn.LSTM if kind == "lstm" else nn.GRU
        rnn = _init(cls(s["d"], s["hidden"], s["layers"], batch_first=True), generator).to(dtype)
        x = _randn((batch, s["seq"], s["d"]), dtype, device, generator)
        return functools.partial(_first, rnn), (x,)
    if kind == "mha":
        d = s["heads"] * s["head_dim"]
        mha = _init(nn.MultiheadAttention(d, s["heads"], batch_first=True), generator).to(dtype)
        x = _randn((batch, s["seq"], d), dtype, device, generator)
        return functools.partial(_self_attention, mha), (x,)
    if kind == "sdpa":
        shape = (batch, s["heads"], s["seq"], s["head_dim"])
        q, k, v = (_randn(shape, dtype, device, generator) for _ in range(3))
        return functools.partial(F.scaled_dot_product_attention, is_causal=s["causal"]), (q, k, v)
    if kind == "embedding_bag":
        ids = torch.randint(0, s["rows"], (batch, s["bag"]), device=device, generator=generator)
        bag = nn.EmbeddingBag(s["rows"], s["dim"], mode=s["mode"])
        return _init(bag, generator).to(dtype), (ids,)
    module, shape = _module(kind, s)
    x = _randn((batch, *shape), dtype, device, generator)
    return _init(module, generator).to(dtype), (x,)


def _first(rnn, x):
    return rnn(x)[0]


def _self_attention(mha, x):
    return mha(x, x, x, need_weights=False)[0]
