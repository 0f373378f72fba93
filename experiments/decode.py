"""Decode vs prefill: `y = x @ W` from GEMV (batch 1) to GEMM, and one transformer block per phase.

gemv_gemm (C14-C17): x [b, C] times a weight W [C, C]. FLOPs = 2 b C^2; bytes = W + x + y read or
written once, so while W dominates the intensity is ~2b / itemsize: b/2 in float32, b in bfloat16.
Copies of W rotate until they span `rotate_bytes_factor` LLCs, so each call streams W from memory
as a decode step does; x and y are not rotated (a decode step's activations are hot in cache).

narrow_gemm: the same for a narrow weight of as many elements, stored as nn.Linear stores it
(W [N, K], y = x @ W^T), K = a N for each `narrow_aspects` a: a narrow output over a long K makes
few output tiles, each streaming all of K, where the square weight spreads over many (the op
model reads it between aspects, analysis/sweeps.py). Not a claim's data.

block_prefill / block_decode (C18): one pre-norm block (norm, QKV projection, attention, output
projection, norm, MLP with 4d hidden, no biases). Prefill runs b sequences of L tokens, writes
their K and V to the cache and attends causally; decode runs one new token per sequence whose K, V
take the cache's last slot and whose query attends over all L slots. FLOPs from the definition:
projections 8 T d^2, MLP 16 T d^2 (T tokens), attention QK^T and PV 4 d per (query, key) pair
(prefill: L (L+1) / 2 causal pairs per sequence; decode: L); norms, softmax, GELU and residual
adds are O(T d) and not counted. Bytes are the fewest moved: weights once, the KV cache once
(written by prefill, read by decode: 2 b L d elements either way), x in and the output out.
Whole layers (weights + cache) rotate like W. float32 runs with TF32 off. On a GPU both phases are
timed as CUDA-graph replays whatever the call length, as serving stacks run a decode step: timed
as eager launches, a block's dozen-plus small kernels measure the host's launch rate, not the memory
(the `timer` column says `cuda_event` where capture failed and it fell back to eager launches).
"""

from __future__ import annotations

import math
from itertools import product
from dataclasses import dataclass, fields, replace

import torch
import torch.nn.functional as F
from omegaconf import MISSING

from experiments.core.budget import SlowPointGuard, rotation_copies
from experiments.core.config import ConfigError, ExperimentConfig
from experiments.core.dtypes import itemsize, tf32_matmul, torch_dtype
from experiments.core.checks import check_close, need_host_memory, need_storage_dtype
from experiments.core.harness import Point, State
from experiments.core.runner import Context, WrongResult

NAME = "decode"
DESCRIPTION = "x @ W from GEMV (batch 1) to GEMM, and a transformer block in prefill vs decode"

OPS = ("gemv_gemm", "block_prefill", "block_decode")
NARROW = "narrow_gemm"  # run where narrow_aspects are given
NORMS = ("rmsnorm", "layernorm")
MLP_RATIO = 4
# Relative error against float64 from the same inputs that a correct kernel stays under
# (x @ W: as matmul's; block: its update out - x, after a dozen roundings in the dtype).
TOLERANCE = {"float64": 1e-12, "float32": 1e-5, "float16": 5e-3, "bfloat16": 2e-2}
BLOCK_TOLERANCE = {"float64": 1e-10, "float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}
CHECK_ROWS = 4  # rows of x @ W, sequences of a block, compared against float64
CHECK_TOKENS = 128  # prefill: first tokens of a checked sequence (causal: later ones not needed)


@dataclass
class DecodeConfig(ExperimentConfig):
    name: str = NAME
    ops: list[str] = MISSING
    channels: list[int] = MISSING  # C of x @ W
    narrow_aspects: list[float] = MISSING  # K / N of the narrow weights (each of C^2 elements)
    batches: list[int] = MISSING  # b of x @ W
    d_model: int = MISSING
    heads: int = MISSING
    norm: str = MISSING
    block_batches: list[int] = MISSING  # sequences
    block_contexts: list[int] = MISSING  # L: prompt / cache length
    max_call_s: float = MISSING  # skip a point whose predicted call is longer (slow CPUs)
    rotate_bytes_factor: float = MISSING  # rotate weight copies until they span this many LLCs
    max_copies: int = MISSING

    RULES = {"ops": OPS, "channels": "sizes", "batches": "sizes", "block_batches": "sizes",
             "block_contexts": "sizes", "max_call_s": "> 0", "rotate_bytes_factor": "> 0",
             "max_copies": "int >= 1"}

    def __post_init__(self):
        super().__post_init__()
        if self.heads < 1 or self.d_model < 1 or self.d_model % self.heads:
            raise ConfigError(f"experiment.d_model={self.d_model} must be a positive multiple "
                              f"of experiment.heads={self.heads}")
        if self.norm not in NORMS:
            raise ConfigError(f"experiment.norm={self.norm!r}; allowed: {list(NORMS)}")
        if any(not a > 1 for a in self.narrow_aspects):
            raise ConfigError(f"experiment.narrow_aspects={list(self.narrow_aspects)} must each be "
                              "> 1 (K / N of a narrow weight; 1 is gemv_gemm's square)")


Config = DecodeConfig


# ---- counting ---------------------------------------------------------------------------------

def gemv_counts(b: int, C: int, size: int, N: int | None = None) -> tuple[float, float]:
    """(FLOPs, bytes) of y = x @ W with x [b, C], W [C, N] (N = C: square): W, x and y each
    moved once."""
    N = C if N is None else N
    return 2.0 * b * C * N, float((C * N + b * C + b * N) * size)


def narrow_shape(C: int, aspect: float) -> tuple[int, int]:
    """(K, N) of a narrow weight of about C^2 elements with K / N about `aspect`, multiples of
    32 (as the layers' widths)."""
    N = max(32, round(C / math.sqrt(aspect) / 32) * 32)
    return round(C * C / N / 32) * 32, N


def block_counts(phase: str, b: int, L: int, d: int, size: int, norm: str) -> dict:
    """The work of one block call, from the definition (see the module docstring)."""
    tokens = b * L if phase == "prefill" else b
    pairs = L * (L + 1) // 2 if phase == "prefill" else L  # (query, key) pairs per sequence
    counts = {
        "tokens": tokens, "context": L,
        "projection_flops": 2.0 * tokens * d * d * (3 + 1),
        "mlp_flops": 2.0 * tokens * d * MLP_RATIO * d * 2,
        "attention_flops": 2.0 * 2 * b * pairs * d,  # QK^T and PV, summed over heads
        "weight_bytes": float((12 * d * d + (2 if norm == "rmsnorm" else 4) * d) * size),
        "kv_bytes": float(2 * b * L * d * size),
        "activation_bytes": float(2 * tokens * d * size),
    }
    counts["flops"] = counts["projection_flops"] + counts["mlp_flops"] + counts["attention_flops"]
    counts["bytes"] = counts["weight_bytes"] + counts["kv_bytes"] + counts["activation_bytes"]
    return counts


# ---- shared helpers ---------------------------------------------------------------------------

def _dtype(ctx: Context) -> torch.dtype:
    need_storage_dtype(ctx.dtype, "decode runs in plain dtypes")
    return torch_dtype(ctx.dtype)


def _copies(ctx: Context, cfg: DecodeConfig, set_bytes: float, extra_bytes: float = 0) -> int:
    """How many copies of one call's data rotate: enough to span `rotate_bytes_factor` LLCs,
    at least 2, at most max_copies and half the free memory."""
    need_host_memory(ctx, set_bytes + extra_bytes)
    return rotation_copies(set_bytes, ctx.facts.llc_bytes, cfg.rotate_bytes_factor,
                           at_least=2, at_most=cfg.max_copies, free_bytes=ctx.free_memory(),
                           extra_bytes=extra_bytes)


def _precision(ctx: Context) -> dict:
    return {"allow_tf32": False} if ctx.dtype == "float32" else {}


# ---- x @ W ------------------------------------------------------------------------------------

def _gemv(state: State, b: int, K: int, N: int, weights: dict, narrow: bool) -> dict:
    ctx, cfg, dt = state.ctx, state.cfg, _dtype(state.ctx)
    if (K, N) not in weights:  # one set of copies per weight shape, shared by every b
        weights.clear()
        w = ctx.randn(N, K).to(dt).t() if narrow else ctx.randn(K, N).to(dt)
        # clones, not fresh draws: caches key on addresses, not values, and a copy is much cheaper
        count = _copies(ctx, cfg, K * N * w.element_size())
        weights[K, N] = [w] + [w.clone() for _ in range(count - 1)]  # clone keeps the strides
    ws = weights[K, N]
    x = ctx.randn(b, K).to(dt)
    y = torch.full((b, N), float("nan"), device=ctx.device, dtype=dt)
    with tf32_matmul(False):  # float32 means IEEE float32
        torch.mm(x, ws[0], out=y)
        ctx.sync()
        r = min(b, CHECK_ROWS)
        err = check_close(y[:r], lambda: x[:r].double() @ ws[0].double(), TOLERANCE[ctx.dtype],
                          "x @ W")
        # the timer's call index runs on across samples, so every copy takes its turn
        stats = state.time(lambda i: torch.mm(x, ws[i % len(ws)], out=y))
    # aspect: the configured K / N, whose rows the op model reads as one family
    shape = {"aspect": state.args["aspect"], "layout": "nn.Linear's W^T"} if narrow else {}
    return stats | {"rel_error": err, "check_passed": True,
                    "params": {"weight_copies": len(ws), "check_rows": r} | shape
                    | _precision(ctx)}


# ---- transformer block ------------------------------------------------------------------------

@dataclass
class Layer:
    """One block's weights and KV cache: what one call reads, rotated as a whole."""

    wqkv: torch.Tensor  # [d, 3d]
    wo: torch.Tensor  # [d, d]
    w1: torch.Tensor  # [d, 4d]
    w2: torch.Tensor  # [4d, d]
    norm1_w: torch.Tensor
    norm2_w: torch.Tensor
    norm1_b: torch.Tensor | None  # layernorm only
    norm2_b: torch.Tensor | None
    k: torch.Tensor  # cache [b, heads, L, d / heads]
    v: torch.Tensor

    def map(self, fn) -> Layer:
        return Layer(**{f.name: None if getattr(self, f.name) is None else fn(getattr(self, f.name))
                        for f in fields(self)})


def make_layer(ctx: Context, d: int, heads: int, b: int, L: int, norm: str, dtype: torch.dtype,
               random_cache: bool) -> Layer:
    # weights scaled by 1/sqrt(fan-in) keep activations near unit size (fp16 stays in range)
    w = lambda i, o: (ctx.randn(i, o) / math.sqrt(i)).to(dtype)
    gain = lambda: (1 + 0.1 * ctx.randn(d)).to(dtype)
    bias = lambda: (0.1 * ctx.randn(d)).to(dtype) if norm == "layernorm" else None
    shape = (b, heads, L, d // heads)
    cache = (lambda: ctx.randn(*shape).to(dtype)) if random_cache else (
        lambda: torch.empty(shape, device=ctx.device, dtype=dtype))  # prefill overwrites it all
    return Layer(w(d, 3 * d), w(d, d), w(d, MLP_RATIO * d), w(MLP_RATIO * d, d),
                 gain(), gain(), bias(), bias(), cache(), cache())


def _norm(x, weight, bias, kind):
    if kind == "rmsnorm":
        return F.rms_norm(x, (x.shape[-1],), weight, eps=1e-5)
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps=1e-5)


def block(x: torch.Tensor, p: Layer, heads: int, norm: str, decode: bool) -> torch.Tensor:
    """One pre-norm block. Prefill: x [b, L, d] fills the cache and attends causally. Decode:
    x [b, 1, d]; its K, V take the cache's last slot and its query attends over all L slots."""
    b, t, d = x.shape
    qkv = _norm(x, p.norm1_w, p.norm1_b, norm) @ p.wqkv
    q, k, v = qkv.view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)  # each [b, heads, t, dh]
    p.k[:, :, -t:].copy_(k)
    p.v[:, :, -t:].copy_(v)
    a = F.scaled_dot_product_attention(q, p.k, p.v, is_causal=not decode)
    x = x + a.transpose(1, 2).reshape(b, t, d) @ p.wo
    return x + F.gelu(_norm(x, p.norm2_w, p.norm2_b, norm) @ p.w1) @ p.w2


def _block(state: State, phase: str, b: int, L: int, counts: dict) -> dict:
    ctx, cfg, dt = state.ctx, state.cfg, _dtype(state.ctx)
    decode = phase == "decode"
    d, t = cfg.d_model, 1 if decode else L
    # intermediates of one call: ~qkv 3, attention 1, residual 1, MLP 2 x 4 hidden (x tokens x d)
    scratch = 13 * counts["tokens"] * d * itemsize(ctx.dtype)
    if ctx.device.type == "cuda":  # the graph's private pool holds a second set beside eager's
        scratch *= 2
    count = _copies(ctx, cfg, counts["weight_bytes"] + counts["kv_bytes"], scratch)
    first = make_layer(ctx, d, cfg.heads, b, L, cfg.norm, dt, random_cache=decode)
    layers = [first] + [first.map(torch.clone) for _ in range(count - 1)]
    x = ctx.randn(b, t, d).to(dt)
    with tf32_matmul(False):  # float32 means IEEE float32
        out = block(x, first, cfg.heads, cfg.norm, decode)
        ctx.sync()
        if not torch.isfinite(out).all():
            raise WrongResult(f"{phase}: output has non-finite elements")
        # float64 reference on the first sequences (and, in prefill, their first tokens)
        r, q = min(b, CHECK_ROWS), min(t, CHECK_TOKENS)
        kv = slice(None) if decode else slice(0, q)
        ref_layer = replace(first, k=first.k[:r, :, kv], v=first.v[:r, :, kv]).map(
            lambda z: z.to(torch.float64, copy=True))
        x64 = x[:r, :q].double()
        ref = block(x64, ref_layer, cfg.heads, cfg.norm, decode)
        # the block's update, out - x: the residual x alone would hide a wrong attention or MLP
        err = check_close(out[:r, :q].double() - x64, ref - x64, BLOCK_TOLERANCE[ctx.dtype], phase)
        del ref_layer, ref, out
        # graph replay even past GRAPH_BELOW_S: production runs a decode step as one graph, and
        # eager launches of its dozen-plus small kernels would time the host. The block has no
        # host sync and writes its cache in place, so a graph of the inner calls replays it.
        stats = state.time(lambda i: block(x, layers[i % len(layers)], cfg.heads, cfg.norm,
                                           decode), force_graph=True)
    params = {key: val for key, val in counts.items() if key not in ("flops", "bytes")}
    params |= {"phase": phase, "d_model": d, "heads": cfg.heads, "mlp_hidden": MLP_RATIO * d,
               "norm": cfg.norm, "layer_copies": count, "check_sequences": r, "check_tokens": q,
               "force_graph": True}
    return stats | {"rel_error": err, "check_passed": True, "params": params | _precision(ctx)}


# ---- the sweep --------------------------------------------------------------------------------

def points(cfg: DecodeConfig, ctx: Context) -> list[Point]:
    """x @ W per C and b (square, then each narrow aspect); then each block phase per b and
    context L."""
    size, out, gemv = itemsize(ctx.dtype), [], "gemv_gemm" in cfg.ops
    shapes = [("gemv_gemm", C, C, None) for C in sorted(cfg.channels)] + [
        (NARROW, *narrow_shape(C, a), a) for a in sorted(cfg.narrow_aspects)
        for C in sorted(cfg.channels)]
    for (op, K, N, aspect), b in product(shapes, sorted(cfg.batches)) if gemv else ():
        flops, nbytes = gemv_counts(b, K, size, N)
        out.append(Point({"op": op, "n": N, "m": b, "k": K, "batch": b, "flops": flops,
                          "bytes": nbytes, "working_set_bytes": int(nbytes)},
                         args={"aspect": aspect}))
    for phase in (p for p in ("prefill", "decode") if f"block_{p}" in cfg.ops):
        for b, L in product(sorted(cfg.block_batches), sorted(cfg.block_contexts)):
            c = block_counts(phase, b, L, cfg.d_model, size, cfg.norm)
            out.append(Point({"op": f"block_{phase}", "variant": cfg.norm, "n": cfg.d_model,
                              "m": c["tokens"], "k": L, "batch": b, "flops": c["flops"],
                              "bytes": c["bytes"], "working_set_bytes": int(c["bytes"])},
                             args={"phase": phase, "counts": c}))
    return out


def skip(state: State) -> dict | None:
    """A point predicted past max_call_s at the rates of the rows before."""
    guard = SlowPointGuard.after(state.cfg.max_call_s, state.rows)
    return guard.skip(state.row["flops"], state.row["bytes"])


def measure(state: State) -> dict:
    if (row := state.row)["op"] in ("gemv_gemm", NARROW):  # one weight's copies, across b
        return _gemv(state, row["batch"], row["k"], row["n"], state.memo.setdefault("weights", {}),
                     row["op"] == NARROW)
    state.memo.pop("weights", None)  # x @ W's copies go before a block's layers come
    return _block(state, state.args["phase"], row["batch"], row["k"], state.args["counts"])
