"""Fit the roofline from rows, never from typed-in numbers.

Per system (source, host, device):
* bandwidth ceilings: the bandwidth experiment's byte/s against working-set size, cut into windows
  by the cache sizes in the device facts (a working set at most half a cache is resident in it, one
  at least twice the level below is past that level, DRAM starts at 4x the last-level cache). In
  each window the plateau is the top of the curve (points within 10 % of the window's 90th
  percentile: this drops launch-bound small sizes and slow kernels); the ceiling is its median.
  A cache level is kept only if its plateau stands 15 % above the next level's: otherwise the
  curve shows no step there.
* matrix_flops per dtype: the same top-plateau median over the matmul experiment's FLOP/s.
* vector_flops per dtype: a robust (soft-L1) least-squares fit of log min(P, B * I) to the
  intensity experiment's points; P is identified only if >= 2 points lie on each roof.
* l1_bw (GPUs): the top plateau of the l1 experiment (blocks rereading resident tiles), kept if it
  stands 15 % above L2.
* ridge per dtype: compute ceiling / DRAM bandwidth.
Intervals: 95 % percentile bootstrap (medians: scipy.stats.bootstrap; the roof fit: rows
resampled and refitted); a ridge's interval combines its two ceilings' bounds.
A ceiling that cannot be fitted is still a row, with value NaN and a note saying why.
"""

from __future__ import annotations

import inspect
import math

import numpy as np
import pandas as pd
from scipy import optimize, stats

from experiments.analysis.dataset import Dataset, ok

TOP = 0.9  # plateau: within 10 % of the window's 90th percentile
STEP = 1.15  # a cache plateau must stand this much above the next level's
RESIDENT, PAST, DRAM_PAST = 0.5, 2.0, 4.0
# A GPU's L2 is one level shared by every SM: its window reaches the whole capacity, and the top
# plateau inside it finds where the curve really sits (an H200 moves 5.9 TB/s at 34 MB of its
# 60 MB L2, past the half-cache mark, and DRAM speed by 50 MB).
RESIDENT_GPU = 1.0


def resident(facts: dict) -> float:
    """Share of a cache's capacity a working set may fill and still count as resident in it."""
    return RESIDENT_GPU if facts.get("kind") == "cuda" else RESIDENT
N_BOOT = 1000
SEED = 0

# scipy >= 1.15 takes `rng`, older ones `random_state` (deprecated later): use what exists
_RNG = "rng" if "rng" in inspect.signature(stats.bootstrap).parameters else "random_state"

COLUMNS = ["source", "host", "device", "device_kind", "device_name", "system", "ceiling",
           "dtype", "value", "unit", "ci_low", "ci_high", "method", "n_points", "ws_min",
           "ws_max", "capacity_bytes", "sm_clock_mhz", "power_w", "note"]
# Conditions a plateau's points ran at (medians), where the rows recorded them.
CONDITIONS = ("sm_clock_mhz", "power_w")
# Rows a fit may use: ok, and not flagged as measured badly (columns absent in old files).
FLAGS = ("noisy", "contended", "throttled")
MIN_POINTS = 2  # no ceiling from a single point

LABELS = {"dram_bw": "DRAM bandwidth", "matrix_flops": "GEMM ceiling",
          "vector_flops": "FMA (vector) ceiling", "intensity_bw": "bandwidth seen by the FMA sweep",
          "ridge_matrix": "ridge (GEMM / DRAM)", "ridge_vector": "ridge (FMA / DRAM)",
          "latency_graph": "latency floor (graph replay)",
          "latency_eager": "latency floor (eager launch)"}


def label(ceiling: str) -> str:
    """A ceiling's name for readers: 'dram_bw' -> 'DRAM bandwidth', 'l2_bw' -> 'L2 bandwidth'."""
    if ceiling in LABELS:
        return LABELS[ceiling]
    return ceiling[:-3].upper() + " bandwidth" if ceiling.endswith("_bw") else ceiling


def bootstrap_median(values) -> tuple[float, float]:
    v = np.asarray(values, dtype=float)
    if v.size < 2:
        return math.nan, math.nan
    if np.ptp(v) == 0:
        return float(v[0]), float(v[0])
    if v.size < 10:
        # a percentile bootstrap of a median undercovers on a handful of points; the range of
        # n points holds the median with probability 1 - 2^(1-n) (94 % at 5, 99.6 % at 9)
        return float(v.min()), float(v.max())
    res = stats.bootstrap((v,), np.median, n_resamples=N_BOOT, method="percentile",
                          **{_RNG: np.random.default_rng(SEED)})
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def top_plateau(values) -> np.ndarray:
    """Mask of the points on the top plateau of a curve."""
    v = np.asarray(values, dtype=float)
    return v >= TOP * np.quantile(v, 0.9)


def _row(ceiling, value, unit, method, n, dtype=None, ci=(math.nan, math.nan), points=None,
         **extra):
    """A fitted ceiling; `points` (the rows on its plateau) give the clock and power it ran at."""
    cond = {c: float(points[c].median()) if points is not None and c in points
            and points[c].notna().any() else math.nan for c in CONDITIONS}
    return {"ceiling": ceiling, "dtype": dtype, "value": value, "unit": unit,
            "ci_low": ci[0], "ci_high": ci[1], "method": method, "n_points": n} | cond | extra


def fit_rows(rows: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """The rows a fit may use (ok and unflagged), and a note on what was left out."""
    good = ok(rows)
    bad = pd.Series(False, index=good.index)
    left = []
    for flag in FLAGS:
        if flag in good:
            hit = good[flag].fillna(False).astype(bool)
            if hit.any():
                left.append(f"{int(hit.sum())} {flag}")
            bad |= hit
    note = f"left out {', '.join(left)} point(s) of {len(good)}" if left else None
    return good[~bad], note


def _missing(ceiling, unit, note, dtype=None):
    return _row(ceiling, math.nan, unit, "not fitted", 0, dtype, note=note)


def cache_windows(facts: dict, ws_max: float):
    """[(ceiling, lo, hi, capacity)]: working-set windows of each cache level and of DRAM."""
    caches = dict(facts.get("cache_bytes") or {})
    if not caches and facts.get("llc_bytes"):
        caches = {"LLC": facts["llc_bytes"]}
    levels = sorted((size, name) for name, size in caches.items() if size)
    windows, lo = [], 0.0
    for size, name in levels:
        windows.append((f"{name.lower()}_bw", lo, resident(facts) * size, size))
        lo = PAST * size
    dram_lo = DRAM_PAST * levels[-1][0] if levels else ws_max / 4  # no facts: top two octaves
    windows.append(("dram_bw", dram_lo, math.inf, None))
    return windows


def fit_bandwidth(rows: pd.DataFrame, facts: dict) -> list[dict]:
    pts = rows[(rows.byte_per_s > 0) & (rows.working_set_bytes > 0)]
    if pts.empty:
        return [_missing("dram_bw", "B/s", "no ok bandwidth rows")]
    ws, bw = pts.working_set_bytes.to_numpy(float), pts.byte_per_s.to_numpy(float)
    how = "cache sizes from device facts" if facts.get("cache_bytes") or facts.get(
        "llc_bytes") else "no cache sizes in metadata: DRAM = the top two octaves of size"
    fitted = []
    for name, lo, hi, cap in cache_windows(facts, ws.max()):
        inside = (ws >= lo) & (ws <= hi) if lo > 0 else ws <= hi
        extra = {"ws_min": lo, "ws_max": hi, "capacity_bytes": cap}
        if not inside.any():
            limit = f">= {lo:.3g} B" if math.isinf(hi) else f"in [{lo:.3g}, {hi:.3g}] B"
            fitted.append(_missing(name, "B/s", f"no working set {limit}") | extra)
            continue
        top = top_plateau(bw[inside])
        plateau, on = bw[inside][top], ws[inside][top]
        if np.unique(on).size < 2 and name != "dram_bw":
            fitted.append(_missing(name, "B/s", "plateau spans a single size") | extra)
            continue
        if plateau.size < MIN_POINTS:
            fitted.append(_missing(name, "B/s", "a single point on the plateau") | extra)
            continue
        # ws_min/ws_max: the sizes the plateau spans (inside the level's window)
        fitted.append(_row(name, float(np.median(plateau)), "B/s",
                           f"median of the top plateau ({how})", int(plateau.size),
                           ci=bootstrap_median(plateau), points=pts[inside][top],
                           ws_min=float(on.min()), ws_max=float(on.max()), capacity_bytes=cap))
    # Keep a cache level only where the curve steps up above the next (larger) kept level.
    kept, below = [], None
    for r in reversed(fitted):
        if below is not None and not math.isnan(r["value"]) and r["value"] < STEP * below:
            r = _missing(r["ceiling"], "B/s",
                         f"no plateau of its own: {r['value']:.3g} B/s is not {STEP:.2f}x "
                         f"the next level's {below:.3g} B/s") | {
                k: r[k] for k in ("ws_min", "ws_max", "capacity_bytes")}
        elif not math.isnan(r["value"]):
            below = r["value"]
        kept.append(r)
    return kept[::-1]


def fit_l1(rows: pd.DataFrame) -> list[dict]:
    """A GPU's L1: the top plateau of the l1 experiment's reread bandwidth over resident sizes
    (the sizes that spill to L2 fall off it). Ranges are the aggregate working sets."""
    pts = rows[rows.byte_per_s > 0]
    if pts.empty:
        return [_missing("l1_bw", "B/s", "no ok l1 rows")]
    bw = pts.byte_per_s.to_numpy(float)
    top = top_plateau(bw)
    on = pts[top]
    if len(on) < MIN_POINTS:
        return [_missing("l1_bw", "B/s", "a single point on the reread plateau")]
    return [_row("l1_bw", float(np.median(bw[top])), "B/s", "median of the top plateau of "
                 "blocks rereading resident tiles (l1 experiment)", int(top.sum()),
                 ci=bootstrap_median(bw[top]), points=on,
                 ws_min=float(on.working_set_bytes.min()), ws_max=float(on.working_set_bytes.max()))]


def l1_step(fitted: list[dict]) -> list[dict]:
    """Keep the l1 experiment's ceiling only where it stands STEP above L2 (else DRAM), as for the
    cache levels of the bandwidth curve."""
    below = next((c["value"] for name in ("l2_bw", "dram_bw") for c in fitted
                  if c["ceiling"] == name and not math.isnan(c["value"])), None)
    out = []
    for c in fitted:
        if c.get("method", "").endswith("(l1 experiment)") and below and c["value"] < STEP * below:
            c = _missing("l1_bw", "B/s", f"no plateau of its own: {c['value']:.3g} B/s is not "
                         f"{STEP:.2f}x the next level's {below:.3g} B/s")
        out.append(c)
    return out


def fit_top(rows: pd.DataFrame, ceiling: str, what: str) -> list[dict]:
    """Per dtype, the median of the top plateau of FLOP/s (GEMM: the large sizes)."""
    out = []
    for dtype, g in rows[rows.flop_per_s > 0].groupby("dtype"):
        v = g.flop_per_s.to_numpy(float)
        top = top_plateau(v)
        plateau = v[top]
        if plateau.size < MIN_POINTS:
            out.append(_missing(ceiling, "FLOP/s", f"a single point on the top plateau of {what}"
                                " (a ceiling needs at least two)", dtype))
            continue
        out.append(_row(ceiling, float(np.median(plateau)), "FLOP/s",
                        f"median of the top plateau of {what}", int(plateau.size), dtype,
                        bootstrap_median(plateau), points=g[top]))
    return out


def _roof_fit(x, y, start=None):
    """Robust least squares of log y = log min(P, B x); returns (P, B)."""
    lx, ly = np.log(x), np.log(y)
    if start is None:
        start = [ly.max(), (ly - lx).max()]
    res = optimize.least_squares(lambda t: np.minimum(t[0], t[1] + lx) - ly, start,
                                 loss="soft_l1", f_scale=0.1)
    return res.x


def fastest_variant(g: pd.DataFrame):
    """Several kernels (variants) of one dtype: the roof is the fastest one's."""
    best = g.groupby(g.variant.fillna("")).flop_per_s.max().idxmax()
    return g[g.variant.fillna("") == best], best


def fit_roof(rows: pd.DataFrame) -> list[dict]:
    """Per dtype: vector_flops (P) and the bandwidth the sweep sees (B) from the intensity sweep."""
    out = []
    for dtype, g in rows[(rows.flop_per_s > 0) & (rows.intensity > 0)].groupby("dtype"):
        g, best = fastest_variant(g)
        x, y = g.intensity.to_numpy(float), g.flop_per_s.to_numpy(float)
        if len(x) < 4:
            out.append(_missing("vector_flops", "FLOP/s", f"{len(x)} intensity points (< 4)",
                                dtype))
            continue
        # Stage 1 places the ridge; stage 2 takes each roof from the points on its side. A
        # real curve rounds off near the ridge (memory and compute overlap imperfectly), and
        # those points would pull a one-stage fit of P and B below the plateaus they reach.
        ridge = float(np.exp(np.subtract(*_roof_fit(x, y))))
        method = ("robust (soft-L1) least squares of log min(P, B*I) places the ridge; each roof "
                  "is the median of the top plateau of the points on its side") + (
            f" (variant {best})" if best else "")
        for name, unit, side, rate in (("vector_flops", "FLOP/s", x > ridge, y),
                                       ("intensity_bw", "B/s", x < ridge, y / x)):
            if side.sum() < 2:
                out.append(_missing(name, unit, f"the sweep has {side.sum()} point(s) on this "
                                    f"roof (ridge {ridge:.3g} FLOP/B): not identified", dtype))
                continue
            v = rate[side]
            top = top_plateau(v)
            out.append(_row(name, float(np.median(v[top])), unit, method, int(side.sum()),
                            dtype, bootstrap_median(v[top]), points=g[side][top]))
    return out


def ridges(ceilings: list[dict]) -> list[dict]:
    dram = next((c for c in ceilings if c["ceiling"] == "dram_bw"
                 and not math.isnan(c["value"])), None)
    out = []
    for c in ceilings:
        kind = {"matrix_flops": "ridge_matrix", "vector_flops": "ridge_vector"}.get(c["ceiling"])
        if kind is None or math.isnan(c["value"]):
            continue
        if dram is None:
            out.append(_missing(kind, "FLOP/B", "no DRAM bandwidth fitted", c["dtype"]))
            continue
        ridge, floor = c["value"] / dram["value"], elementwise_intensity(c["dtype"])
        if floor and ridge < floor:
            # compute slower than streaming memory even for x + 1: no intensity is memory-bound
            out.append(_missing(kind, "FLOP/B", f"degenerate: {ridge:.2g} FLOP/B is below "
                                f"{floor:.3g}, the intensity of x + 1 in {c['dtype']}: this "
                                f"compute ceiling is slower than memory at every intensity",
                                c["dtype"]))
            continue
        out.append(_row(kind, ridge, "FLOP/B",
                        f"{c['ceiling']} / dram_bw (interval from both intervals' bounds)",
                        c["n_points"] + dram["n_points"], c["dtype"],
                        (c["ci_low"] / dram["ci_high"], c["ci_high"] / dram["ci_low"])))
    return out


def elementwise_intensity(dtype) -> float | None:
    """FLOP/B of x + 1 in `dtype` (1 FLOP, one element read and one written)."""
    size = {"float64": 8, "float32": 4, "tf32": 4, "float16": 2, "bfloat16": 2,
            "float8_e4m3": 1}.get(dtype)
    return 1 / (2 * size) if size else None


def fit_latency(rows: pd.DataFrame) -> list[dict]:
    """The device's per-call floor: the timing experiment's time per tiny kernel, replayed from a
    CUDA graph and launched eagerly (a CPU has neither: its floor is not fitted)."""
    out = []
    for variant in ("graph", "eager"):
        g = rows[(rows.op == "launch_overhead") & (rows.variant == variant) & (rows.time_s > 0)]
        name = f"latency_{variant}"
        if g.empty:
            out.append(_missing(name, "s", f"no {variant} launch_overhead rows"))
            continue
        t = g.time_s.to_numpy(float)
        lo = np.nanmin(g.time_s_q10) if "time_s_q10" in g and g.time_s_q10.notna().any() else t.min()
        hi = np.nanmax(g.time_s_q90) if "time_s_q90" in g and g.time_s_q90.notna().any() else t.max()
        out.append(_row(name, float(np.median(t)), "s", "median time per tiny kernel (timing "
                        "experiment, launch_overhead); interval: the samples' 10-90 % range",
                        int(g.samples.fillna(1).sum()) if "samples" in g else len(g),
                        ci=(float(lo), float(hi)), points=g))
    return out


def fit_system(rows: pd.DataFrame, facts: dict) -> list[dict]:
    out = []
    for name, fit, first in (("bandwidth", lambda r: fit_bandwidth(r, facts), ("dram_bw", "B/s")),
                             ("matmul", lambda r: fit_top(r, "matrix_flops", "GEMM FLOP/s"),
                              ("matrix_flops", "FLOP/s")),
                             ("intensity", fit_roof, ("vector_flops", "FLOP/s")),
                             ("timing", fit_latency, ("latency_graph", "s")),
                             ("l1", fit_l1, ("l1_bw", "B/s"))):
        exp = rows[rows.experiment == name]
        if name == "l1" and not (exp.status != "not_applicable").any():
            continue  # a CPU: its L1 is a window of the bandwidth curve
        good, left = fit_rows(exp)
        if exp.empty or (good.empty and name not in PER_DTYPE):
            why = f"no {name} rows" if exp.empty else f"no usable {name} rows" + (
                f" ({left})" if left else " (none ok)")
            out.append(_missing(*first, why))
            continue
        fitted = fit(good) if not good.empty else []
        for c in fitted:  # say what the fit left out, beside any note of its own
            if left:
                c["note"] = "; ".join(n for n in (c.get("note"), left) if n)
        out += fitted + unfitted(exp, fitted, name)
    out = l1_step(out)
    return out + ridges(out)


# Ceilings fitted per dtype: each dtype the sweep aimed at gets its row, fitted or not.
PER_DTYPE = {"matmul": (("matrix_flops", "FLOP/s"),),
             "intensity": (("vector_flops", "FLOP/s"), ("intensity_bw", "B/s"))}


def unfitted(exp: pd.DataFrame, fitted: list[dict], name: str) -> list[dict]:
    """A "not fitted" row for each (ceiling, dtype) the sweep aimed at that no point survived
    for, saying how many of its points were dropped and why (status, or a flag)."""
    out = []
    for ceiling, unit in PER_DTYPE.get(name, ()):
        have = {c["dtype"] for c in fitted if c["ceiling"] == ceiling}
        for dtype, g in exp.groupby("dtype"):
            if dtype in have:
                continue
            whys = [f"{n} {s}" for s, n in g.status.value_counts().items() if s != "ok"]
            good = ok(g)
            whys += [f"{int(good[f].fillna(False).astype(bool).sum())} {f}" for f in FLAGS
                     if f in good and good[f].fillna(False).astype(bool).any()]
            out.append(_missing(ceiling, unit, f"no point survived: {len(g)} of {len(g)} "
                                f"dropped ({', '.join(whys) or 'no positive rate'})", dtype))
    return out


def dram_ceiling(rows: pd.DataFrame, facts: dict) -> dict | None:
    """The DRAM plateau of these (ok) bandwidth rows alone: a ceiling from a subset of ops."""
    good, _ = fit_rows(rows)
    return next((c for c in fit_bandwidth(good, facts) if c["ceiling"] == "dram_bw"), None) \
        if not good.empty else None


def fit(ds: Dataset) -> pd.DataFrame:
    """The ceilings table of every system in the dataset."""
    out = []
    for _, s in ds.systems().iterrows():
        ident = {k: s[k] for k in ("source", "host", "device", "device_kind", "device_name",
                                   "system")}
        rows = ds.rows[ds.rows.system == s.system]
        out += [ident | c for c in fit_system(rows, ds.facts(s.system))]
    table = pd.DataFrame(out)
    return table.reindex(columns=COLUMNS)


def lookup(ceilings: pd.DataFrame, system: str, ceiling: str, dtype=None) -> pd.Series | None:
    """The fitted row of one ceiling (None when absent or not fitted)."""
    c = ceilings[(ceilings.system == system) & (ceilings.ceiling == ceiling)
                 & ceilings.value.notna()]
    if dtype is not None:
        c = c[c.dtype == dtype]
    return None if c.empty else c.iloc[0]


def value(ceilings, system, ceiling, dtype=None) -> float | None:
    row = lookup(ceilings, system, ceiling, dtype)
    return None if row is None else float(row.value)


def predict(ceilings: pd.DataFrame, system: str, dtype: str, flops: float, nbytes: float,
            graph: bool = True) -> dict:
    """The roofline model of one call: time = max(latency, bytes / B, FLOPs / P).

    B is DRAM bandwidth, P the dtype's GEMM ceiling (else its FMA ceiling), the latency the
    device's floor per call (graph replay, or eager launch with graph=False). Returns time_s,
    bound ('latency', 'memory' or 'compute'), the terms, and roof_flops (min(P, B x I)); missing
    ceilings leave their term out and are named in `missing`."""
    B = value(ceilings, system, "dram_bw")
    P = value(ceilings, system, "matrix_flops", dtype) or value(ceilings, system, "vector_flops",
                                                                     dtype)
    L = value(ceilings, system, "latency_graph" if graph else "latency_eager")
    terms = {"latency": L, "memory": nbytes / B if B and nbytes else None,
             "compute": flops / P if P and flops else None}
    known = {k: v for k, v in terms.items() if v is not None}
    bound = max(known, key=known.get) if known else None
    roof = None
    if P and B and nbytes:
        roof = min(P, B * flops / nbytes)
    return {"time_s": known[bound] if bound else math.nan, "bound": bound,
            "latency_s": L, "memory_s": terms["memory"], "compute_s": terms["compute"],
            "bandwidth_Bps": B, "compute_flops": P, "roof_flops": roof,
            "missing": [k for k, v in (("DRAM bandwidth", B), (f"{dtype} compute", P),
                                       ("latency floor", L)) if not v]}
