"""Decode: why batching sequences turns a GEMV into a GEMM and raises utilisation.

The knee of the time-per-step curve is predicted from the ceilings (DRAM bandwidth from the
bandwidth experiment, the dtype's GEMM ceiling from the matmul experiment) and judged against the
decode rows, which take no part in fitting them.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from experiments.analysis.dataset import param
from experiments.analysis.knees import gemv_rows
from experiments.analysis.claims.base import (NotMeasurable, Result, article_sheet, claim, nearest,
                                              section, text_only, worked_example)
from experiments.analysis.units import qty

SECTION = section("decode", "Decode: why batching raises utilisation", "decode")
BATCHED = 0.5  # C14: b sequences in one GEMM cost less than this share of b GEMVs
FLAT = 1.5  # C16: below half the predicted knee, time per step stays within this of batch 1
KNEE_FACTOR = 1.5  # C17: the measured knee lies within this factor of the predicted one
MIN_CURVES = 3  # C17: curves judged, at the least (fewer: not measurable)
LATENCY = 2.0  # C17: a step slower than this x its weights' streaming time is latency-bound
MEMORY_SHARE = 0.5  # C18: decode is memory-bound when it moves this share of DRAM bandwidth
KV_GROWTH = 0.5  # C18: extra time for extra KV bytes, at least this share of bytes / B
COMPUTE_SHARE = 0.5  # C18: prefill is compute-bound at this share of the GEMM ceiling


def _spread(g: pd.DataFrame) -> pd.Series:
    """Per batch: half its samples' 10-90 % spread as a share of its median time (the +- of a
    time; NaN where the rows do not record it)."""
    if not {"time_s_q10", "time_s_q90"} <= set(g):
        return pd.Series(math.nan, index=g.batch.unique())
    return ((g.time_s_q90 - g.time_s_q10) / 2 / g.time_s).groupby(g.batch).median()


def _gemv(s) -> pd.DataFrame:
    s.exp("decode")
    rows = gemv_rows(s.rows)
    if rows.empty:
        raise NotMeasurable("no ok decode x @ W (gemv_gemm) rows with a batch")
    return rows


@worked_example("C14", "FLOPs of x @ W, x [8, C], W [C, C], C = 4096: 2 b C^2",
                "2 batch_size C^2", 2 * 8 * 4096**2, 1e-9)
def w14(sheets):
    return 2 * 8 * 4096**2, f"{2 * 8 * 4096**2:.4g} FLOPs (8 GEMVs of {2 * 4096**2:.4g} each)"


@claim("C14", SECTION,
       en="In decode, x @ W with x of shape [B, 1, C] is a GEMV; batching b sequences makes it a "
          "GEMM.",
       zh="虽然看着是矩阵乘法，但左边其实是一条向量，本质接近“向量乘矩阵”，称作GEMV……x的shape变成[B, 8, C]，变成更正规的矩阵乘矩阵，称作GEMM",
       prediction=lambda: f"on every curve, b sequences in one GEMM (b = 8, or the nearest batch "
                          f"measured) take less than {BATCHED:.0%} of the time of b separate GEMVs "
                          f"(b x the batch-1 time).",
       fails_if=lambda: f"on some curve a batched step costs {BATCHED:.0%} or more of b "
                        f"single-sequence steps (batching would not share the weights).",
       experiments=("decode",), limits=("BATCHED",))
def c14(s):
    rows = _gemv(s)
    parts, ratios, conds = [], [], []
    for (dtype, c), g in rows.groupby(["dtype", "n"]):
        t, spread = g.groupby("batch").time_s.median(), _spread(g)
        more = t.index[t.index > 1]
        if 1 not in t.index or more.empty:
            continue
        b = max(more[more <= 8]) if (more <= 8).any() else min(more)
        r = t[b] / (b * t[1])
        ratios.append(r)
        conds.append((BATCHED / r - 1, spread[b] + spread[1], f"{dtype} C={int(c)}'s ratio"))
        parts.append(f"{dtype} C={int(c)}: t({b:.0f}) / ({b:.0f} t(1)) = {r:.2f}")
    if not parts:
        raise NotMeasurable("no decode curve with batch 1 and a larger batch")
    worst = max(ratios)
    return Result(worst < BATCHED, "; ".join(parts), "t(b) / (b t(1)), worst curve",
                  worst, f"< {BATCHED} on every curve",
                  "decode: gemv_gemm, batch 1 and b", len(rows), *nearest(*conds))


@worked_example("C15", "FP32 decode intensity 2 b C^2 / (4 C^2) at b = 8 (W dominant)",
                "batch_size / 2 FLOP/byte", 4.0, 1e-9)
def w15(sheets):
    return 2 * 8 / 4, "b / 2 = 4 FLOP/B at b = 8 (bf16: b FLOP/B)"


text_only("C15", SECTION,
          en="With W the dominant data, FP32 decode intensity is about batch / 2 FLOP/byte "
             "(2bC^2 FLOPs over 4C^2 bytes).",
          zh="那么近似的算术强度是 2batch_size·C^2 / 4C^2 = batch_size/2 FLOP/byte",
          prediction="arithmetic from the definition (each decode row counts its intensity this "
                     "way): nothing to measure, so no system gets a verdict.",
          experiments=("decode",))


def _flat(k, g):
    limit = k.predicted / 2 if math.isfinite(k.predicted) else g.index.max()
    return g[g.index <= limit]


def _flat_within(g, knee):
    """The batches below half `knee` (None where the knee is not a finite number)."""
    return g[g.index <= knee / 2] if knee is not None and math.isfinite(knee) else None


def _rise(g, flat) -> float:
    """The largest t(b) / t(1) or t(1) / t(b) over the batches `flat` (inf without batch 1)."""
    if 1 not in g.index:
        return math.inf
    ratio = flat / g[1]
    return float(np.maximum(ratio, 1 / ratio).max())


@claim("C16", SECTION,
       en="Larger batch reuses the same weights, so utilisation rises with batch: time stays "
          "nearly flat while memory-bound.",
       zh="这意味着同一份权重搬进来后，batch越大，计算利用率就越高。",
       prediction=lambda: f"below half the knee predicted from the ceilings, time per step at "
                          f"every batch stays within {FLAT}x of batch 1 (either way), so tokens/s "
                          "grows about linearly there.",
       fails_if=lambda: f"on some curve, the time per step at some batch below half its predicted "
                        f"knee differs from batch 1's by more than {FLAT}x (slower, or faster).",
       experiments=("decode", "bandwidth", "matmul"), limits=("FLAT",))
def c16(s):
    rows = _gemv(s)
    if s.knees.empty or not s.knees.predicted.notna().any():
        raise NotMeasurable("no decode knee predicted (no ceilings for the decode dtypes)")
    parts, rises, skipped, conds = [], [], [], []
    for _, k in s.knees.iterrows():
        curve = rows[(rows.dtype == k["dtype"]) & (rows.n == k.C)]
        g, spread = curve.groupby("batch").time_s.median(), _spread(curve)
        flat = _flat(k, g) if pd.notna(k.predicted) else g.iloc[:0]
        # the knee's interval (from the ceilings') may hold more or fewer batches below its half:
        # where that changes the curve's verdict, the verdict is undecided
        ends = [_flat_within(g, k.get(e)) for e in ("predicted_low", "predicted_high")]
        if len({_rise(g, e) <= FLAT if e is not None and len(e) >= 2 else True  # none judged
                for e in ends}) > 1:
            conds.append((0.0, 1.0, f"{k['dtype']} C={k.C}: which batches lie below half its "
                                    f"knee ({k.predicted_low:.3g} to {k.predicted_high:.3g})"))
        if 1 not in g.index or len(flat) < 2:
            skipped.append(f"{k['dtype']} C={k.C}")
            continue
        ratio = flat / g[1]
        b = (ratio.apply(lambda r: max(r, 1 / r))).idxmax()  # the batch furthest from flat
        rise = max(ratio[b], 1 / ratio[b])
        rises.append(rise)
        conds.append((FLAT / rise - 1, spread[b] + spread[1], f"{k['dtype']} C={k.C}'s rise"))
        parts.append(f"{k['dtype']} C={k.C}: t(b) / t(1) from {ratio.min():.2f} to "
                     f"{ratio.max():.2f} over b <= {flat.index[-1]:.0f}, tokens/s "
                     f"x{flat.index[-1] * g[1] / flat.iloc[-1]:.1f}")
    if not parts:
        raise NotMeasurable("no curve has two batches below half its predicted knee: "
                            + ", ".join(skipped))
    worst = max(rises)
    return Result(worst <= FLAT, "; ".join(parts), "largest t(b) / t(1) or t(1) / t(b) below "
                  "b*/2, worst curve", worst, f"<= {FLAT}", "decode: gemv_gemm; knees predicted "
                  "from DRAM bandwidth and GEMM ceilings", len(rows), *nearest(*conds))


def _ridge_label(sheets) -> str:
    ref = article_sheet(sheets)
    return (f"{ref.name} ridge: {qty(ref.peak('vector', 'float32'), 'FLOP/s')} / "
            f"{qty(ref.bandwidth_Bps, 'B/s')}")


@worked_example("C17", _ridge_label, "≈ 38 FLOP/byte", 38.0, 0.02)
def w17(sheets):
    ridge = article_sheet(sheets).ridge("vector", "float32")
    if ridge is None:
        raise NotMeasurable("the RTX 3090 datasheet lacks FP32 compute or bandwidth")
    return ridge, f"{ridge:.1f} FLOP/B"


def _judge_knee(k, g, B) -> tuple[bool | None, str]:
    """(holds, text) for one curve; holds None when the curve cannot be judged."""
    name = f"{k['dtype']} C={k.C}"
    if not (pd.notna(k.predicted) and math.isfinite(k.predicted)):
        return None, f"{name}: {k.predicted_note or 'no knee predicted'}"
    if not g.index.min() <= k.predicted <= g.index.max():
        return None, (f"{name}: predicted knee b* = {k.predicted:.3g} outside the swept "
                      f"batches {g.index.min():.0f}-{g.index.max():.0f}")
    if 1 in g.index and g[1] > LATENCY * k.weights_bytes / B:
        return None, (f"{name}: latency-bound (batch 1 takes {qty(g[1], 's')}, streaming W "
                      f"takes {qty(k.weights_bytes / B, 's')})")
    pred = f"predicted {k.predicted:.3g} [{k.predicted_low:.3g}, {k.predicted_high:.3g}]"
    if not (pd.notna(k.measured) and math.isfinite(k.measured)):
        if str(k.measured_note).startswith("fewer"):
            return None, f"{name}: {k.measured_note}"
        return False, f"{name}: {pred}, measured: {k.measured_note}"
    # a fixed factor between the two knees: wider (noisier) intervals must not help
    ratio = k.measured / k.predicted
    return bool(1 / KNEE_FACTOR <= ratio <= KNEE_FACTOR), (
        f"{name}: {pred}, measured {k.measured:.3g} [{k.measured_low:.3g}, "
        f"{k.measured_high:.3g}], {ratio:.2f}x")


@claim("C17", SECTION,
       en="The RTX 3090 ridge point is 35.6 TFLOP/s / 936 GB/s ≈ 38 FLOP/byte; below it "
          "memory-bound, above it compute-bound.",
       zh="这是RTX3090的Roofline模型的ridge point：35.6 TFLOPS / 936 GB/s ≈ 38 FLOP/byte。低于这个值，就是Memory-bound，反之就是Compute-bound。",
       prediction=lambda: f"for every decode curve whose predicted knee lies inside the swept "
                          f"batches and whose step is not latency-bound (at least {MIN_CURVES} "
                          f"such curves), the measured knee lies within {KNEE_FACTOR:g}x of the "
                          "knee predicted from the ceilings.",
       fails_if=lambda: f"a judged curve's measured knee lies more than {KNEE_FACTOR:g}x from the "
                        f"predicted one, or the curve shows no knee where one is predicted.",
       experiments=("decode", "bandwidth", "matmul"), limits=("KNEE_FACTOR", "MIN_CURVES"))
def c17(s):
    rows = _gemv(s)
    if s.knees.empty:
        raise NotMeasurable("no decode knee predicted (no ceilings for the decode dtypes)")
    parts, verdicts = [], []
    for _, k in s.knees.iterrows():
        g = rows[(rows.dtype == k["dtype"]) & (rows.n == k.C)].groupby("batch").time_s.median()
        B = k.bandwidth_Bps
        if not (pd.notna(B) and B > 0):
            parts.append(f"{k['dtype']} C={k.C}: {k.predicted_note}")
            continue
        holds, text = _judge_knee(k, g, B)
        parts.append(text + ("" if holds is not None else " (not judged)"))
        if holds is not None:
            verdicts.append(holds)
    if len(verdicts) < MIN_CURVES:
        raise NotMeasurable(f"{len(verdicts)} curve(s) can be judged here, fewer than "
                            f"{MIN_CURVES}", "; ".join(parts))
    return Result(all(verdicts), "; ".join(parts), "share of judged curves whose knees agree",
                  float(np.mean(verdicts)), f"= 1 (every judged curve, at least {MIN_CURVES})",
                  "decode: gemv_gemm; knees predicted from DRAM bandwidth and GEMM ceilings",
                  len(rows))


def _decode_part(s, dtype, dec, B) -> tuple[bool | None, str]:
    graph = dec[dec.timer == "cuda_event_graph"] if s.kind == "cuda" else dec
    if graph.empty:
        return None, (f"{dtype}: decode timed from eager launches ({', '.join(sorted(set(dec.timer)))}"
                      "), which measures the host launching its small kernels: not judged")
    one = graph[graph.batch == graph.batch.min()]  # the claim: decode at batch 1
    share = float((one.byte_per_s / B).min())
    slow = one.loc[one.byte_per_s.idxmin()]
    kv = param(graph, "kv_bytes")
    grow, text = None, ""
    for batch, g in graph.assign(kv=kv).dropna(subset=["kv"]).groupby("batch"):
        if g.kv.nunique() >= 2:  # the largest batch with two cache lengths or more
            lo, hi = g.loc[g.kv.idxmin()], g.loc[g.kv.idxmax()]
            need = KV_GROWTH * (hi.bytes - lo.bytes) / B
            grow = hi.time_s - lo.time_s >= need
            text = (f"; batch {batch:.0f}: {qty(hi.kv - lo.kv, 'B')} more KV cache adds "
                    f"{qty(hi.time_s - lo.time_s, 's')} (at least {qty(need, 's')} expected)")
    if grow is None:
        return None, f"{dtype}: no batch with two KV-cache lengths: growth with KV not judged"
    good = bool(share >= MEMORY_SHARE and grow)
    return good, (f"{dtype} decode at batch {slow.batch:.0f}: at least "
                  f"{qty(slow.byte_per_s, 'B/s')} = {share:.0%} of DRAM bandwidth (slowest of "
                  f"{len(one)} cache lengths, {qty(slow.bytes, 'B')} per step)" + text)


def _prefill_part(s, dtype, pre) -> tuple[bool | None, str]:
    P, ridge = s.ceiling("matrix_flops", dtype), s.ceiling("ridge_matrix", dtype)
    if P is None or ridge is None:
        return None, f"{dtype}: no {dtype} GEMM ceiling or ridge fitted: prefill not judged"
    top = pre.loc[pre.flop_per_s.idxmax()]
    share = top.flop_per_s / P
    good = bool(share >= COMPUTE_SHARE and top.intensity > ridge)
    return good, (f"{dtype} prefill: {qty(top.flop_per_s, 'FLOP/s')} = {share:.0%} of the GEMM "
                  f"ceiling at {top.intensity:.0f} FLOP/B (ridge {ridge:.0f})")


@claim("C18", SECTION,
       en="Prefill is like a decode with a large batch and is compute-bound; decode at batch 1 is "
          "memory-bound.",
       zh="Prefill阶段其实就像是一次batch_size比较大的Decode，这就解释了为什么它是Compute-bound的。对应Decode阶段，batch_size是1，它是Memory-bound的。",
       prediction=lambda: f"a transformer block's decode step at its smallest batch (1), timed "
                          f"as decode runs (CUDA graph replay), moves at least "
                          f"{MEMORY_SHARE:.0%} of the DRAM bandwidth at every cache length; at "
                          f"the largest batch measured with two cache lengths, a step takes "
                          f"longer with the longer KV cache (by at least {KV_GROWTH:.0%} of the "
                          f"extra bytes / bandwidth); its prefill lies above the ridge at "
                          f"{COMPUTE_SHARE:.0%} of the GEMM ceiling or more.",
       fails_if=lambda: f"decode at the smallest batch moves under {MEMORY_SHARE:.0%} of DRAM "
                        f"bandwidth at some cache length, or at the largest batch with two "
                        f"cache lengths the longer cache adds under {KV_GROWTH:.0%} of its extra "
                        f"bytes / bandwidth, or prefill reaches under {COMPUTE_SHARE:.0%} of the "
                        "GEMM ceiling or lies at or below the ridge.",
       experiments=("decode", "bandwidth", "matmul"), figure="roofline",
       limits=("MEMORY_SHARE", "KV_GROWTH", "COMPUTE_SHARE"))
def c18(s):
    rows = s.exp("decode", "block")
    B = float(s.need_ceiling("dram_bw").value)
    parts, verdicts = [], []
    for dtype, g in rows.groupby("dtype"):
        pre, dec = g[g.op.str.contains("prefill")], g[g.op.str.contains("decode")]
        if pre.empty or dec.empty:
            parts.append(f"{dtype}: no block_{'prefill' if pre.empty else 'decode'} rows")
            continue
        (d_ok, d_text), (p_ok, p_text) = _decode_part(s, dtype, dec, B), _prefill_part(s, dtype,
                                                                                       pre)
        parts += [d_text, p_text]
        if d_ok is None or p_ok is None:  # the claim is about both phases: judge both or none
            parts[-1] += f" ({dtype} not judged: one phase cannot be)"
            continue
        verdicts.append(d_ok and p_ok)
    if not verdicts:
        raise NotMeasurable("no dtype has both block phases judged here", "; ".join(parts))
    return Result(all(verdicts), "; ".join(parts), "share of judged phases that behave as "
                  "claimed", float(np.mean(verdicts)), f"= 1 (every judged phase and dtype: "
                  f"decode >= {MEMORY_SHARE:.0%} of DRAM bandwidth, KV growth >= "
                  f"{KV_GROWTH:.0%} of bytes / B, prefill >= {COMPUTE_SHARE:.0%} of the GEMM "
                  "ceiling above the ridge)",
                  "decode: block_prefill, block_decode; DRAM bandwidth; GEMM ceilings",
                  len(rows))
