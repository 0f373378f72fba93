"""Fit the roofline from rows, never from typed-in numbers.

Per system (source, host, device):
* bandwidth ceilings (analysis/levels.py): the bandwidth experiment's byte/s against working-set
  size, cut into windows by the cache sizes in the device facts (on a CPU, what its measuring
  threads hold together; a working set at most half a cache is resident in it, one at least twice
  the level below is past that level, DRAM starts at 4x the last-level cache). In each window the
  plateau is the top of the curve (points within 10 % of the window's 90th percentile: this drops
  launch-bound small sizes and slow kernels). DRAM's ceiling is the plateau of the op that moves
  the most (STREAM's headline is its triad: a CPU's copy-like ops also read every line they
  write, traffic no op counts); on a GPU, its window first drops the points faster than 1.1x its
  largest working set's median (still in the L2's shadow).
  A cache level is kept where its plateau stands 15 % above the next level's, or runs at its
  rate and 15 % above DRAM's (noted: no step; levels.kept_levels); otherwise it has no plateau
  of its own. Rows of one NUMA node's cores alone give dram_bw_numa<N>.
* matrix_flops per dtype: the top plateau of the matmul experiment's FLOP/s; on host-clocked CPU
  points a lone best size counts too, with a note where it is the largest size (a burst, or a
  curve that may still rise: the ceiling is at least that; `fit_top` says why).
* vector_flops per dtype: a robust (soft-L1) least-squares fit of log min(P, B * I) to the
  intensity experiment's points places the ridge; each roof is the top plateau of the points on
  its side, identified only if >= 2 points lie there.
* l1_bw (GPUs): the top plateau of the l1 experiment (blocks rereading resident tiles), kept if it
  stands 15 % above L2.
* ridge per dtype: compute ceiling / DRAM bandwidth.
* a CPU's FMA and GEMM ceilings: the silicon's peak at their points' clock, and the fraction of
  it they reach (analysis/silicon.py).
A plateau's value (plateaus.plateau_value): its median, with a 95 % percentile bootstrap interval
(scipy.stats.bootstrap; the range of fewer than 10 points); on host-clocked CPU points its best
point, the plateau's range as the interval. Every interval is then widened to at least the
run-to-run spread of its kind (plateaus.RUN_TO_RUN). A ridge's interval combines its two
ceilings' bounds.
A ceiling that cannot be fitted is still a row, with value NaN and a note saying why.
Each point's rate is its median time's, except a CPU point timed by the host's clock: its best
time's (`fit_view`).
"""

from __future__ import annotations

import math
import weakref

import numpy as np
import pandas as pd
from scipy import optimize

from experiments.analysis import silicon
from experiments.analysis.dataset import Dataset, ok, reading
from experiments.analysis.gemm import fit_top
from experiments.analysis.levels import (AT_RATE, DRAM_PAST, PAST, RESIDENT,  # noqa: F401
                                         RESIDENT_GPU, STEP, cache_windows, fit_bandwidth, fit_l1,
                                         l1_step, resident, scope)
from experiments.analysis.plateaus import (CONDITIONS, HOST_CLOCK, MIN_POINTS, TOP,  # noqa: F401
                                           best_timed, bootstrap_median, ceiling_row as _row,
                                           cpu_conditions,
                                           missing_row as _missing, plateau_value, repeatable,
                                           top_plateau, top_two)
from experiments.analysis.units import words
from experiments.kernels.cpu_team import ONE_CPU

# Rows a fit may use: ok, and not flagged as measured badly (columns absent in old files).
FLAGS = ("noisy", "contended", "throttled")

COLUMNS = ["source", "host", "device", "device_kind", "device_name", "system", "ceiling",
           "dtype", "value", "unit", "ci_low", "ci_high", "method", "n_points", "ws_min",
           "ws_max", "capacity_bytes", "sm_clock_mhz", "power_w", *silicon.COLUMNS, "note"]
def label(ceiling: str) -> str:
    """A ceiling's name for readers: 'dram_bw' -> 'DRAM bandwidth', 'l2_bw' -> 'L2 bandwidth'."""
    return words(ceiling)


def fit_view(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows with the rates a ceiling is judged on. A CPU point timed by the host's clock
    counts at its best time: other processes, a neighbouring VM or the OS only ever add to such a
    time, so its minimum is the kernel's own (as STREAM and mixbench-cpu report theirs, the
    minimum over runs). A GPU point keeps its median: its spread is the device's own (clocks
    moving under the power cap), which a ceiling must not hide. Claims on these ceilings read the
    same view (claims.systems), so a comparison never mixes the two. Its time_s is the best time
    too, so that the view of a view is itself (a claim's rows fitted again would otherwise read
    their best rates scaled twice)."""
    host = best_timed(rows)
    if not host.any():
        return rows
    faster = (rows.time_s / rows.time_s_min).where(host, 1.0).astype(float)
    return rows.assign(flop_per_s=rows.flop_per_s * faster, byte_per_s=rows.byte_per_s * faster,
                       time_s=rows.time_s.where(~host, rows.time_s_min))


def fit_rows(rows: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """The rows a fit may use (ok and unflagged, in `fit_view`'s rates), and a note on what was
    left out. `noisy` (a wide spread around the median) does not drop a point fitted on its best
    time; `contended` and `throttled` (load or clocks seen during the point) still do."""
    good = fit_view(ok(rows))
    bad = pd.Series(False, index=good.index)
    best = best_timed(good)
    left = []
    for flag in FLAGS:
        if flag in good:
            hit = good[flag].fillna(False).astype(bool)
            if flag == "noisy":  # a spread around the median; a best time does not read it
                hit &= ~best
            if hit.any():
                left.append(f"{int(hit.sum())} {flag}")
            bad |= hit
    note = f"left out {', '.join(left)} point(s) of {len(good)}" if left else None
    return good[~bad], note


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
    """Per dtype: vector_flops (P) and the bandwidth the sweep sees (B) from the intensity sweep
    (a CPU's: its team's points; its one-CPU point, `one_cpu`, rides on P's row)."""
    out = []
    scopes = rows.params.map(scope) if "params" in rows else pd.Series("machine", rows.index)
    alone, rows = rows[scopes == ONE_CPU], rows[scopes == "machine"]
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
        host = bool(best_timed(g).all())
        fit = ("robust (soft-L1) least squares of log min(P, B*I) places the ridge; each roof "
               "is the ")
        for name, unit, side, rate in (("vector_flops", "FLOP/s", x > ridge, y),
                                       ("intensity_bw", "B/s", x < ridge, y / x)):
            if side.sum() < 2:
                out.append(_missing(name, unit, f"the sweep has {side.sum()} point(s) on this "
                                    f"roof (ridge {ridge:.3g} FLOP/B): not identified", dtype))
                continue
            v = rate[side]
            top = top_plateau(v)
            if top.sum() < MIN_POINTS:  # a lone top point: as likely noise as the roof, and
                top = top_two(v)  # no interval: the two highest points
            value, ci, method = plateau_value(v[top], host, " of the points on its side")
            variant = f" (variant {best})" if best else ""
            extra = one_cpu(alone[alone.dtype == dtype]) if name == "vector_flops" else {}
            out.append(_row(name, value, unit, fit + method + variant, int(side.sum()), dtype, ci,
                            points=g[side][top], **extra))
    return out


def one_cpu(rows: pd.DataFrame) -> dict:
    """The FMA chain on one CPU of the team: its best FLOP/s and the clocks it ran at
    (`one_cpu`, `one_cpu_<clock>`: analysis/silicon.py sets it beside the team's); {} without
    an ok point."""
    rows = rows[rows.flop_per_s > 0]
    if rows.empty:
        return {}
    best = rows.loc[[rows.flop_per_s.idxmax()]]
    clocks = cpu_conditions(best)
    return {"one_cpu": float(best.flop_per_s.iloc[0])} | {
        f"one_cpu_{k}": clocks.get(k, math.nan) for k in ("cpu_freq_mhz", "core_mhz", "fma_mhz")}


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
                             ("matmul", lambda r: fit_top(r, "matrix_flops", "GEMM FLOP/s",
                                                        ok(rows[rows.experiment == "matmul"])),
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
        with reading(f"the {name} rows ({len(good)} ok)"):
            fitted = fit(good) if not good.empty else []
        for c in fitted:  # say what the fit left out, beside any note of its own
            if left:
                c["note"] = "; ".join(n for n in (c.get("note"), left) if n)
        out += fitted + unfitted(exp, fitted, name)
    kind = str(rows.device_kind.iloc[0]) if len(rows) else "cpu"
    out = silicon.shared_host([repeatable(c, kind)
                               for c in silicon.with_physical_peak(l1_step(out), facts)])
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
    """The DRAM plateau of these (ok) bandwidth rows alone, pooled over their ops: a reference
    from a subset of ops (C10: the ops whose traffic is x + 1's), its interval what a repeat run
    may read (plateaus.repeatable)."""
    good, _ = fit_rows(rows)
    c = next((c for c in fit_bandwidth(good, facts, pooled=True)
              if c["ceiling"] == "dram_bw"), None) if not good.empty else None
    return None if c is None else repeatable(c, str(good.device_kind.iloc[0]))


def fit(ds: Dataset) -> pd.DataFrame:
    """The ceilings table of every system in the dataset."""
    out = []
    for _, s in ds.systems().iterrows():
        ident = {k: s[k] for k in ("source", "host", "device", "device_kind", "device_name",
                                   "system")}
        rows = ds.rows[ds.rows.system == s.system]
        with reading(s.system):
            out += [ident | c for c in fit_system(rows, ds.facts(s.system))]
    table = pd.DataFrame(out)
    return table.reindex(columns=COLUMNS)


def lookup(ceilings: pd.DataFrame, system: str, ceiling: str, dtype=None) -> pd.Series | None:
    """The fitted row of one ceiling (None when absent or not fitted); with dtype None, the
    first fitted row of any dtype."""
    return _fitted_index(ceilings).get((system, ceiling, dtype))


# id(table) -> (weak reference, row count, index): the placements step looks up thousands of
# ceilings in one table, and a boolean mask per lookup took most of that step's time, on the
# aggregate steps' critical path. Tables are never edited in place.
_INDEXES: dict[int, tuple] = {}


def _fitted_index(ceilings: pd.DataFrame) -> dict:
    """(system, ceiling, dtype or None for any) -> the first fitted row, built once per table."""
    key = id(ceilings)
    hit = _INDEXES.get(key)
    if hit is not None and hit[0]() is ceilings and hit[1] == len(ceilings):
        return hit[2]
    index: dict = {}
    for _, row in ceilings[ceilings.value.notna()].iterrows():
        dtype = row.get("dtype")
        if isinstance(dtype, str):
            index.setdefault((row.system, row.ceiling, dtype), row)
        index.setdefault((row.system, row.ceiling, None), row)
    _INDEXES[key] = (weakref.ref(ceilings, lambda _, key=key: _INDEXES.pop(key, None)),
                     len(ceilings), index)
    return index


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
