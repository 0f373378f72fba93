"""The bandwidth ceilings of the memory levels: L1, L2, LLC and DRAM windows of the bandwidth
curve (the methods: analysis/roofline.py's docstring), and a GPU's L1 from the l1 experiment.

CPU windows use the cache that the measuring threads hold together (device facts
extra.cache_total_bytes: private L1/L2 add up over cores), where the facts have it.
DRAM is the curve's asymptote: the ceiling is the plateau of the op that moves the most in the
DRAM window (each op's top plateau, the highest value: STREAM's headline is its triad). On a
CPU a written line is first read (write-allocate), traffic no op counts: copy, scale and x + 1
write one line per line read, triad and add one per two, so their counted bandwidth sits below
DRAM's. A GPU's points there count only if no faster than DRAM_CAP x the median of their op's
largest working set (faster ones still read partly from the last cache); a host-clocked CPU's
all count (`past_shadow` says why). Each value: plateaus.plateau_value.
Rows of a NUMA node alone (params scope "numa<N>", bandwidth experiment) give dram_bw_numa<N>.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from experiments.analysis.plateaus import (MIN_POINTS, best_timed, bootstrap_median, ceiling_row,
                                           missing_row, plateau_value, top_plateau)

STEP = 1.15  # a cache plateau must stand this much above the next level's
# ...or at least this much of it, to run at its rate (kept_levels): a level's best point moves
# by a few % from run to run, even on a quiet machine
AT_RATE = 0.95
RESIDENT, PAST, DRAM_PAST = 0.5, 2.0, 4.0
# A GPU's L2 is one level shared by every SM: its window reaches the whole capacity, and the top
# plateau inside it finds where the curve really sits (a GPU's L2 can keep its rate past the
# half-cache mark and fall to DRAM's speed short of its capacity).
RESIDENT_GPU = 1.0


def resident(facts: dict) -> float:
    """Share of a cache's capacity a working set may fill and still count as resident in it."""
    return RESIDENT_GPU if facts.get("kind") == "cuda" else RESIDENT


DRAM_CAP = 1.1  # DRAM points no faster than this x the largest working set's median
LARGEST = 1.5  # "the largest working set": within this factor of the largest


def cache_windows(facts: dict, ws_max: float):
    """[(ceiling, lo, hi, capacity)]: working-set windows of each cache level and of DRAM."""
    caches = dict((facts.get("extra") or {}).get("cache_total_bytes") or facts.get("cache_bytes")
                  or {})
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


def scope(params) -> str:
    """A bandwidth row's threads: "machine" (all cores), or "numa<N>" (one NUMA node's cores)."""
    try:
        params = json.loads(params) if isinstance(params, str) else params
    except ValueError:
        params = None
    return (params.get("scope") if isinstance(params, dict) else None) or "machine"


def below_shadow(ws: np.ndarray, bw: np.ndarray) -> np.ndarray:
    """Mask of DRAM-window points no faster than DRAM_CAP x the median of the largest working
    set's points: faster ones still read partly from the LLC."""
    largest = ws >= ws.max() / LARGEST
    return bw <= DRAM_CAP * float(np.median(bw[largest]))


def fit_bandwidth(rows: pd.DataFrame, facts: dict, pooled: bool = False) -> list[dict]:
    """The machine's levels, then DRAM per NUMA node where rows ran on one node alone. `pooled`:
    DRAM from all the ops' points together, not the fastest op's."""
    scopes = rows.params.map(scope) if "params" in rows else pd.Series("machine", rows.index)
    out = fit_levels(rows[scopes == "machine"], facts, pooled)
    for name in sorted(set(scopes) - {"machine"}):
        dram = next(c for c in fit_levels(rows[scopes == name], facts, pooled)
                    if c["ceiling"] == "dram_bw")
        out.append(dram | {"ceiling": f"dram_bw_{name}"})
    return out


def fastest_op(ops: np.ndarray, ws: np.ndarray, bw: np.ndarray,
               host: bool) -> tuple[np.ndarray, str | None]:
    """(mask of its points past the LLC's shadow, name) of the op whose top plateau there stands
    highest (plateau_value), of the ops with a plateau of MIN_POINTS; (None, None) where no op has
    such a plateau. A GPU's ops have each their shadow judged on their own largest working set (a
    copy's 30 GB/s would cut a triad's 40); a host-clocked CPU's are not (`past_shadow`)."""
    best, mask, name = -math.inf, None, None
    for op in np.unique(ops):
        mine = ops == op
        mine[mine] = past_shadow(ws[mine], bw[mine], host)
        top = top_plateau(bw[mine], host)
        value = plateau_value(bw[mine][top], host)[0] if top.sum() >= MIN_POINTS else -math.inf
        if value > best:
            best, mask, name = value, mine, str(op)
    return mask, name


def past_shadow(ws: np.ndarray, bw: np.ndarray, host: bool) -> np.ndarray:
    """The DRAM window's points past the LLC's shadow. A GPU's: `below_shadow`. A host-clocked
    CPU's: all of them. The window starts at DRAM_PAST x the LLC, and past a few times the L3 a
    CPU's triad reaches the same best at every size; its points there differ by when they ran,
    not by their size, and a cut against the largest size's point (one moment) drops every
    point that caught a quiet one."""
    return np.ones(ws.size, bool) if host else below_shadow(ws, bw)


def own_kernels(pts: pd.DataFrame, inside: np.ndarray, host: bool) -> np.ndarray:
    """A CPU's window (each cache level's and DRAM's): its own STREAM kernels' points (variant
    numba: pinned, one thread per core) where it has any, so that every level is one kernel's.
    Its half dtypes run torch's ops on torch's threads, whose points can read above numba's in
    one window and below them in another: mixed in, they can set a level's ceiling and hide the
    step to the next (STEP). Where numba is installed they stop short of the DRAM window
    (bandwidth.py _torch_sizes); a torch point there can read above STREAM's best, in a quiet
    second."""
    if not host or "variant" not in pts:
        return np.ones(len(pts), bool)
    own = (pts.variant == "numba").to_numpy()
    return own if (own & inside).any() else np.ones(len(pts), bool)


def fit_levels(rows: pd.DataFrame, facts: dict, pooled: bool = False) -> list[dict]:
    pts = rows[(rows.byte_per_s > 0) & (rows.working_set_bytes > 0)]
    if pts.empty:
        return [missing_row("dram_bw", "B/s", "no ok bandwidth rows")]
    ws, bw = pts.working_set_bytes.to_numpy(float), pts.byte_per_s.to_numpy(float)
    host = bool(best_timed(pts).all())
    how = "cache sizes from device facts" if facts.get("cache_bytes") or facts.get(
        "llc_bytes") else "no cache sizes in metadata: DRAM = the top two octaves of size"
    fitted, op = [], None
    for name, lo, hi, cap in cache_windows(facts, ws.max()):
        inside = (ws >= lo) & (ws <= hi) if lo > 0 else ws <= hi
        extra = {"ws_min": lo, "ws_max": hi, "capacity_bytes": cap}
        if not inside.any():
            limit = f">= {lo:.3g} B" if math.isinf(hi) else f"in [{lo:.3g}, {hi:.3g}] B"
            fitted.append(missing_row(name, "B/s", f"no working set {limit}") | extra)
            continue
        inside &= own_kernels(pts, inside, host)
        if name == "dram_bw":  # the asymptote, not the LLC's shadow; the fastest op's
            idx = np.flatnonzero(inside)
            fastest, op = fastest_op(pts.op.to_numpy(str)[idx], ws[idx], bw[idx], host) \
                if not pooled and "op" in pts else (None, None)
            if fastest is None:
                fastest = past_shadow(ws[idx], bw[idx], host)
            inside[idx[~fastest]] = False
        # a cache level's plateau spans two sizes (below); DRAM's is one op's, any size
        top = top_plateau(bw[inside], host, ws[inside] if name != "dram_bw" else None)
        plateau, on = bw[inside][top], ws[inside][top]
        if np.unique(on).size < 2 and name != "dram_bw":
            fitted.append(missing_row(name, "B/s", "plateau spans a single size") | extra)
            continue
        if plateau.size < MIN_POINTS:
            fitted.append(missing_row(name, "B/s", "a single point on the plateau") | extra)
            continue
        whose = f" of {op}" if op and name == "dram_bw" else ""
        value, ci, method = plateau_value(plateau, host, whose)
        # ws_min/ws_max: the sizes the plateau spans (inside the level's window)
        fitted.append(ceiling_row(name, value, "B/s", f"{method} ({how})", int(plateau.size),
                                  ci=ci, points=pts[inside][top], ws_min=float(on.min()),
                                  ws_max=float(on.max()), capacity_bytes=cap))
    return kept_levels(fitted)


def kept_levels(fitted: list[dict]) -> list[dict]:
    """Keep a cache level where its plateau steps up STEP above the next (larger) kept level's,
    or where it runs at that level's rate (AT_RATE) and STEP above DRAM's: caches that the
    core's own ports bound alike. A core whose two address units issue two 16-byte loads or
    stores a cycle streams its L1 at 32 bytes a cycle, as fast as its L2 fills it; such a level
    says it has no step. A
    level further below the next's, or no faster than DRAM, has no plateau of its own: its
    window's points ran at the next level's rate (sizes too small to time, or cache sizes that
    lie)."""
    dram = next((r["value"] for r in fitted if r["ceiling"] == "dram_bw"), math.nan)
    kept, below = [], None
    for r in reversed(fitted):
        value = r["value"]
        if below is None or math.isnan(value) or value >= STEP * below:
            pass
        elif value >= AT_RATE * below and value >= STEP * dram:  # no DRAM: False
            r = r | {"note": f"no step over the next level: {value / below:.2f}x its "
                             f"{below:.3g} B/s ({value / dram:.1f}x DRAM's)"}
        else:
            r = missing_row(r["ceiling"], "B/s",
                            f"no plateau of its own: {value:.3g} B/s is not {STEP:.2f}x "
                            f"the next level's {below:.3g} B/s") | {
                k: r[k] for k in ("ws_min", "ws_max", "capacity_bytes")}
        if not math.isnan(r["value"]):
            below = r["value"]
        kept.append(r)
    return kept[::-1]


def fit_l1(rows: pd.DataFrame) -> list[dict]:
    """A GPU's L1: the top plateau of the l1 experiment's reread bandwidth over resident sizes
    (the sizes that spill to L2 fall off it). Ranges are the aggregate working sets."""
    pts = rows[rows.byte_per_s > 0]
    if pts.empty:
        return [missing_row("l1_bw", "B/s", "no ok l1 rows")]
    bw = pts.byte_per_s.to_numpy(float)
    top = top_plateau(bw)
    on = pts[top]
    if len(on) < MIN_POINTS:
        return [missing_row("l1_bw", "B/s", "a single point on the reread plateau")]
    return [ceiling_row("l1_bw", float(np.median(bw[top])), "B/s", "median of the top plateau "
                        "of blocks rereading resident tiles (l1 experiment)", int(top.sum()),
                        ci=bootstrap_median(bw[top]), points=on,
                        ws_min=float(on.working_set_bytes.min()),
                        ws_max=float(on.working_set_bytes.max()))]


def l1_step(fitted: list[dict]) -> list[dict]:
    """Keep the l1 experiment's ceiling only where it stands STEP above L2 (else DRAM), as for the
    cache levels of the bandwidth curve."""
    below = next((c["value"] for name in ("l2_bw", "dram_bw") for c in fitted
                  if c["ceiling"] == name and not math.isnan(c["value"])), None)
    out = []
    for c in fitted:
        if c.get("method", "").endswith("(l1 experiment)") and below and c["value"] < STEP * below:
            c = missing_row("l1_bw", "B/s", f"no plateau of its own: {c['value']:.3g} B/s is not "
                            f"{STEP:.2f}x the next level's {below:.3g} B/s")
        out.append(c)
    return out
