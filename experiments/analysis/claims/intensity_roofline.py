"""Arithmetic intensity and the roofline: x + 1, a 4096^3 GEMM, and min(P, B x I).

Every check predicts its points from ceilings measured apart from them: x + 1 from the DRAM
bandwidth of the ops with its traffic pattern (copy and scale: one read and one write per
element); the GEMM from the FMA peak of the intensity experiment and the datasheet; the
intensity sweep from the bandwidth experiment's DRAM ceiling and the FMA experiment's fitted
compute ceiling. Tolerances are fixed, never widened by a ceiling's interval: noisier points must
not make a bound easier to meet.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from experiments.analysis import datasheets, roofline
from experiments.analysis.claims.base import (PHYSICAL, NotMeasurable, Result, article_sheet,
                                              claim, counts, nearest, half_width, section,
                   worked_example)
from experiments.analysis.units import qty

SECTION = section("intensity", "Arithmetic intensity: x + 1 against a 4096^3 GEMM", "matmul")
ROOF = section("roofline", "The roofline", "roofline")

MARGIN = 0.10  # model error allowed around a ceiling (fixed: noise must not widen it)
FAR_BELOW = 0.10  # C10: a memory-bound op uses less than this share of the compute ceiling
SAME_TRAFFIC = ("copy", "scale")  # one read and one write per element, as x + 1
COMPUTE_SHARE, MEMORY_SHARE = 0.5, 0.2  # C11: compute-bound GEMM
TOUCH = 0.8  # C12: a roof is reached when a held-out point comes within 20 % of it
UNDER = 0.9  # C12: share of held-out points that must lie under the roof (+ MARGIN)
MIN_POINTS = 5  # C12: points a dtype's sweep needs to be judged


def _dram_same_traffic(s):
    """(B, (low, high), ops used, rows) for x + 1: the DRAM plateau of copy and scale."""
    rows = s.exp("bandwidth")
    ops = [op for op in SAME_TRAFFIC if (rows.op == op).any()]
    if not ops:
        ops = sorted(set(rows.op) - {"add_one"})
    if not ops:
        raise NotMeasurable("no bandwidth op besides x + 1 to predict it from")
    ref = rows[rows.op.isin(ops)]
    c = roofline.dram_ceiling(ref, s.facts)
    if c is None or not math.isfinite(c["value"]):
        raise NotMeasurable(f"no DRAM plateau of {', '.join(ops)}"
                            + (f" ({c['note']})" if c and c.get("note") else ""))
    sheet = s.sheet.bandwidth_Bps if s.sheet is not None else None
    if sheet and c["value"] > PHYSICAL * sheet:
        raise NotMeasurable(f"{', '.join(ops)} move {qty(c['value'], 'B/s')} past the caches, "
                            f"more than the {s.sheet.name} datasheet's {qty(sheet, 'B/s')} (+"
                            f"{PHYSICAL - 1:.0%}): not a physical reading")
    return c, ops, ref


def _add_one_past_caches(s, c):
    rows = s.exp("bandwidth", "add_one")
    rows = rows[(rows.dtype == "float32") & (rows.working_set_bytes >= c["ws_min"])]
    if rows.empty:
        raise NotMeasurable(f"no float32 x + 1 rows with a working set >= "
                            f"{qty(c['ws_min'], 'B')} (past the caches)")
    return rows


@worked_example("C10", "1 FLOP / (4 B read + 4 B written): intensity of x + 1 in FP32",
                "0.125 FLOP/byte", 0.125, 1e-9)
def w10(sheets):
    return 1 / (4 + 4), "0.125 FLOP/B"


@claim("C10", SECTION,
       en="y = x + 1 in FP32 moves 8 bytes per FLOP: intensity 0.125 FLOP/byte, so it is "
          "memory-bound.",
       zh="合计：1FLOP，8字节 …… 0.125很低，说明大规模的逐元素加法会是一个Memory-bound的场景。",
       prediction=lambda: f"past the caches, x + 1 attains DRAM bandwidth x 0.125 FLOP/s, the "
                          f"bandwidth measured on copy and scale (the same one-read, one-write "
                          f"traffic), within {MARGIN:.0%}; and under {FAR_BELOW:.0%} of the "
                          f"float32 compute ceiling.",
       fails_if=lambda: f"x + 1's FLOP/s falls more than {MARGIN:.0%} off copy/scale's bandwidth "
                        f"x 0.125, or reaches {FAR_BELOW:.0%} of the float32 compute ceiling.",
       experiments=("bandwidth",), figure="bandwidth", limits=("MARGIN", "FAR_BELOW"))
def c10(s):
    c, ops, ref = _dram_same_traffic(s)
    rows = _add_one_past_caches(s, c)
    B = c["value"]
    lo, hi = 1 - MARGIN, 1 + MARGIN
    # x + 1 in the statistic B is: a host-clocked CPU's best point (plateaus.plateau_value)
    stat = "max" if roofline.best_timed(rows).all() else "median"
    ratios = rows.flop_per_s / (B * rows.intensity)
    ratio = float(ratios.agg(stat))
    flops = rows.flop_per_s.agg(stat)
    peak = s.ceiling_row("vector_flops", "float32")
    peak = peak if peak is not None else s.ceiling_row("matrix_flops", "float32")
    frac = flops / float(peak.value) if peak is not None else None
    good = lo <= ratio <= hi and (frac is None or frac < FAR_BELOW)
    # noise: B's repeat interval (x + 1 runs in copy and scale's job, yet its ratio to them
    # moves between repeats as much as B does) and the spread of x + 1's own points
    spread = float((ratios.max() - ratios.min()) / 2 / ratio)
    near = nearest((min(ratio - lo, hi - ratio) / ratio, half_width(c) + spread,
                    "measured / predicted"),
                   (1 - frac / FAR_BELOW if frac is not None else math.nan,
                    half_width(peak) + spread, "the share of compute"))
    return Result(bool(good),
                  f"x + 1: {qty(flops, 'FLOP/s')} at a counted {rows.intensity.median():.3f} "
                  f"FLOP/B; {', '.join(ops)} move {qty(B, 'B/s')} past the caches, predicting "
                  f"{qty(B * rows.intensity.median(), 'FLOP/s')} (measured / predicted "
                  f"{ratio:.2f}, allowed {lo:.2f} to {hi:.2f})"
                  + (f"; {frac:.2%} of the float32 compute ceiling" if frac is not None else
                     "; no float32 compute ceiling fitted: 'far below compute' not judged"),
                  "x + 1 FLOP/s / (copy-and-scale DRAM bandwidth x 0.125)", ratio,
                  f"in [{lo:.2f}, {hi:.2f}] and < {FAR_BELOW:.0%} of float32 compute",
                  f"{counts(rows)}; predicted from {counts(ref)}", len(rows) + len(ref), *near)


@worked_example("C11", "2 x 4096^3 FLOPs of a 4096 x 4096 GEMM", "≈ 1374 亿 (1.374e11) FLOPs",
                1.374e11, 1e-3)
def w11(sheets):
    return 2 * 4096**3, f"{2 * 4096**3:.4g} FLOPs; FP32 intensity 2n^3 / (3n^2 x 4 B) = " \
                        f"{2 * 4096**3 / (12 * 4096**2):.0f} FLOP/B at n = 4096"


@claim("C11", SECTION,
       en="A 4096x4096 matrix product costs 2 x 4096^3 ≈ 1.374e11 FLOPs and is compute-bound "
          "(intensity in the hundreds).",
       zh="那就是2×4096^3这么多的FLOPS，约1374亿。所以矩阵乘法会是Compute-bound的场景，算术强度约大几百。",
       prediction=lambda: f"the float32 GEMM at n = 4096 attains at least {COMPUTE_SHARE:.0%} of "
                          f"the float32 compute peak measured apart from it (the FMA peak of the "
                          f"intensity experiment, else the datasheet) while using under "
                          f"{MEMORY_SHARE:.0%} of the DRAM bandwidth.",
       fails_if=lambda: f"the GEMM reaches under {COMPUTE_SHARE:.0%} of the compute peak, or "
                        f"moves {MEMORY_SHARE:.0%} or more of the DRAM bandwidth (memory, not "
                        "arithmetic, would be what bounds it).",
       experiments=("matmul", "intensity", "bandwidth"), limits=("COMPUTE_SHARE", "MEMORY_SHARE"))
def c11(s):
    rows = s.exp("matmul")
    if not (rows.dtype == "float32").any():
        raise NotMeasurable("no ok float32 matmul rows (the article's claim is about FP32)")
    rows = rows[rows.dtype == "float32"]
    row = rows[rows.n == 4096].iloc[0] if (rows.n == 4096).any() else rows.loc[rows.n.idxmax()]
    peak, source = s.ceiling("vector_flops", "float32"), "the float32 FMA peak"
    if peak is None and s.sheet is not None and s.sheet.peak("vector", "float32"):
        peak, source = s.sheet.peak("vector", "float32"), f"the {s.sheet.name} datasheet"
    if peak is None:
        raise NotMeasurable("no float32 compute peak apart from the GEMM itself: no float32 "
                            "intensity sweep fitted and no datasheet entry")
    bw = float(s.need_ceiling("dram_bw").value)
    share, mem = row.flop_per_s / peak, row.byte_per_s / bw
    return Result(bool(share >= COMPUTE_SHARE and mem < MEMORY_SHARE),
                  f"float32 n = {int(row.n)}: {qty(row.flop_per_s, 'FLOP/s')} = {share:.0%} of "
                  f"{source} ({qty(peak, 'FLOP/s')}); it moves {qty(row.byte_per_s, 'B/s')} = "
                  f"{mem:.1%} of DRAM bandwidth at a counted {row.intensity:.0f} FLOP/B",
                  "GEMM FLOP/s / float32 compute peak", float(share),
                  f">= {COMPUTE_SHARE}, with DRAM use < {MEMORY_SHARE}",
                  f"matmul: gemm float32 n = {int(row.n)}; {source}; DRAM bandwidth", 1)


FIT_COLUMNS = ("dtype", "variant", "flop_per_s", "intensity", "device_kind", "timer", "time_s",
               "time_s_min")


def _peaks_without_each(g, P: float) -> np.ndarray:
    """Per point, the compute roof fitted from the sweep's other points (P where they identify
    none): a roof at the plateau's best point (a CPU's) could never be crossed by the points
    that set it."""
    # only what fit_roof reads for a roof's value, text as plain objects: a copy of every
    # column (Arrow-backed text each a take of its own) per refit took most of the claims step
    g = g[[c for c in FIT_COLUMNS if c in g]]
    g = g.astype({c: object for c in g if pd.api.types.is_string_dtype(g[c])})
    out = []
    for i in g.index:
        c = next((c for c in roofline.fit_roof(g.drop(index=i))
                  if c["ceiling"] == "vector_flops"), None)
        out.append(c["value"] if c is not None and math.isfinite(c["value"]) else P)
    return np.asarray(out, dtype=float)


@claim("C12", ROOF,
       en="Roofline: attainable performance <= min(peak compute, bandwidth x intensity).",
       zh="Roofline模型：实际性能 ≤ min(GPU峰值算力，显存带宽×算术强度)",
       prediction=lambda: f"with B the DRAM bandwidth of the bandwidth experiment's copy and "
                          f"scale (the chain's traffic: one read, one write per element) and P "
                          f"the FMA experiment's compute ceiling for the dtype (fitted without "
                          f"the point judged), the points of the intensity sweep (at least "
                          f"{MIN_POINTS}) lie under min(P, B x I) (at "
                          f"least {UNDER:.0%} of them, within {MARGIN:.0%}), and some reach "
                          f"within {1 - TOUCH:.0%} of each roof.",
       fails_if=lambda: f"more than {1 - UNDER:.0%} of the points rise above min(P, B x I) by over "
                        f"{MARGIN:.0%}, or no point comes within {1 - TOUCH:.0%} of the memory "
                        f"roof (intensity under half the ridge) or of the compute roof (over twice "
                        "the ridge; a sweep that never saturates has none there).",
       experiments=("intensity", "bandwidth"), limits=("UNDER", "TOUCH", "MARGIN", "MIN_POINTS"))
def c12(s):
    rows = s.exp("intensity")
    # the chain's traffic is a copy's: a CPU's write-allocate reads its written lines too, so the
    # fastest op's DRAM ceiling (a triad's) would sit above any y = f(x) sweep
    dram = _dram_same_traffic(s)[0]
    # B against the sweep's points, measured by another job at other minutes: a repeat's spread
    B, wB = float(dram["value"]), half_width(dram)
    parts, good, judged, used, conds = [], True, 0, 0, []
    for dtype, g in rows[(rows.flop_per_s > 0) & (rows.intensity > 0)].groupby("dtype"):
        g, _ = roofline.fastest_variant(g)
        if len(g) < MIN_POINTS:
            parts.append(f"{dtype}: {len(g)} points, fewer than {MIN_POINTS} (not judged)")
            continue
        peak = s.ceiling_row("vector_flops", dtype)
        top = g.loc[g.intensity.idxmax()]
        if peak is None:
            if top.flop_per_s >= TOUCH * B * top.intensity:  # still on the memory roof
                judged, good, used = judged + 1, False, used + len(g)
                conds.append((-1.0, 0.0, f"{dtype}: a compute roof reached"))  # no noise flips it
                parts.append(f"{dtype}: the sweep never leaves the memory roof (at "
                             f"{top.intensity:.3g} FLOP/B: {qty(top.flop_per_s, 'FLOP/s')}), so "
                             "no point reaches a compute roof")
            else:
                parts.append(f"{dtype}: no FMA compute ceiling fitted (not judged)")
            continue
        P = float(peak.value)
        ridge = P / B
        roof = np.minimum(_peaks_without_each(g, P), B * g.intensity) * (1 + MARGIN)
        under = float((g.flop_per_s <= roof).mean())
        mem, cmp_ = g[g.intensity < ridge / 2], g[g.intensity > 2 * ridge]
        touch_mem = bool((mem.flop_per_s >= TOUCH * B * mem.intensity).any())
        touch_cmp = bool((cmp_.flop_per_s >= TOUCH * P).any())
        # the roofs' runs against the sweep's: B and P were measured by other jobs, at other
        # minutes (the share under the roof compares points with roofs of the same sweep)
        wP = half_width(peak)
        conds += [((mem.flop_per_s / (B * mem.intensity)).max() / TOUCH - 1 if len(mem)
                   else -1.0, wB, f"{dtype}: the memory roof's nearest point"),
                  ((cmp_.flop_per_s / P).max() / TOUCH - 1 if len(cmp_) else -1.0, wP,
                   f"{dtype}: the compute roof's nearest point")]
        judged += 1
        used += len(g)
        good &= under >= UNDER and touch_mem and touch_cmp
        parts.append(f"{dtype}: P = {qty(P, 'FLOP/s')} (FMA ceiling), B = {qty(B, 'B/s')}, ridge "
                     f"{ridge:.3g} FLOP/B; {under:.0%} of {len(g)} points under the roof; memory "
                     f"roof reached {'yes' if touch_mem else 'no'} ({len(mem)} points under half "
                     f"the ridge), compute roof {'yes' if touch_cmp else 'no'} ({len(cmp_)} "
                     "points over twice the ridge)")
    if not judged:
        raise NotMeasurable(f"no dtype of the intensity sweep has {MIN_POINTS} points and an FMA "
                            "ceiling", "; ".join(parts))
    return Result(bool(good), "; ".join(parts), "points under the roof and touching both roofs "
                  "(every dtype judged)", float(good), f"under >= {UNDER:.0%} (+{MARGIN:.0%}), "
                  f"each roof within {1 - TOUCH:.0%}", "intensity sweep; DRAM bandwidth of the "
                  "bandwidth experiment's copy and scale; FMA compute ceilings", used,
                  *nearest(*conds))


@worked_example("C13", lambda sheets: f"{datasheets.ARTICLE_DEVICE}: "
                f"{qty(article_sheet(sheets).bandwidth_Bps, 'B/s')} x 0.125 FLOP/B",
                "≈ 117 GFLOPS", 117e9)
def w13(sheets):
    ref = article_sheet(sheets)
    if not ref.bandwidth_Bps:
        raise NotMeasurable(f"the {ref.name} datasheet has no bandwidth")
    return ref.bandwidth_Bps * 0.125, qty(ref.bandwidth_Bps * 0.125, "FLOP/s")


@claim("C13", ROOF,
       en="On an RTX 3090 an elementwise add attains at most 936 GB/s x 0.125 ≈ 117 GFLOP/s.",
       zh="能解释逐元素加法为什么喂不饱计算单元：936 GB/s×0.125 FLOP/byte≈117 GFLOPS",
       prediction=lambda: f"here: x + 1 attains at most this device's DRAM bandwidth (copy and "
                          f"scale) x 0.125, within {MARGIN:.0%}, at every point past the caches.",
       fails_if=lambda: f"some x + 1 point exceeds copy-and-scale bandwidth x 0.125 by more than "
                        f"{MARGIN:.0%} (the bound would not hold).",
       experiments=("bandwidth",), limits=("MARGIN",))
def c13(s):
    c, ops, ref = _dram_same_traffic(s)
    rows = _add_one_past_caches(s, c)
    worst = float((rows.flop_per_s / (c["value"] * rows.intensity)).max())
    return Result(worst <= 1 + MARGIN,
                  f"this device: {qty(c['value'], 'B/s')} x {rows.intensity.median():.3f} = "
                  f"{qty(c['value'] * rows.intensity.median(), 'FLOP/s')}; x + 1 attains at "
                  f"most {qty(rows.flop_per_s.max(), 'FLOP/s')}",
                  "fastest x + 1 / (bandwidth x 0.125)", worst, f"<= {1 + MARGIN:g} x the bound",
                  f"{counts(rows)}; bound from {counts(ref)}", len(rows) + len(ref))
