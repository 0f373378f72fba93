"""The GEMM (matrix-unit) ceiling per dtype: the top plateau of the matmul experiment's FLOP/s,
and on host-clocked CPU points what a lone best size stands for (fit_top)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from experiments.analysis.plateaus import (MIN_POINTS, best_timed, ceiling_row, missing_row,
                                           plateau_value, top_plateau, top_two)


def past_its_peak(g: pd.DataFrame, top: np.ndarray) -> bool:
    """A lone top point that is not the sweep's largest size: the curve came down after it (a
    CPU GEMM library's cache-sized blocking can make a mid size, hot in cache, the best of all).
    One at the largest size may still rise (fit_top)."""
    if "n" not in g or g.n.isna().any():
        return False
    return float(g.n.to_numpy(float)[top].max()) < float(g.n.max())


def a_burst_on_top(g: pd.DataFrame, top: np.ndarray) -> bool:
    """A lone top point flagged noisy (its calls' CV above cv_threshold): its best call is as
    likely a burst as a rise, so it cannot say that the curve still rises (a CPU's matrix units
    can burst above their steady rate for a call or two, at any size)."""
    return "noisy" in g and bool(g.noisy.fillna(False).astype(bool).to_numpy()[top].all())


def larger_sizes_left_out(g: pd.DataFrame, top: np.ndarray, taken: pd.DataFrame | None) -> bool:
    """Sizes above the lone top were measured (`taken`: this experiment's ok rows) and their
    points left out (contended): where the curve goes past the top is unknown."""
    if taken is None or "n" not in g or "n" not in taken:
        return False
    same = taken[taken.dtype == g.dtype.iloc[0]]
    return bool(same.n.max() > g.n.to_numpy(float)[top].max())


def fit_top(rows: pd.DataFrame, ceiling: str, what: str,
            taken: pd.DataFrame | None = None) -> list[dict]:
    """Per dtype, the median of the top plateau of FLOP/s (GEMM: the large sizes); on host-clocked
    CPU points its best point (the plateau's range as its interval). Load only ever slows such a
    point, and a CPU GEMM library's sizes differ by their blocking, not by noise around one rate:
    the best size is what the library reaches, as torch.mm's peers report it (the best over
    sizes and calls); a lone best point past which the curve came down (`past_its_peak`) is
    that too, the next best its interval's low end. So is a lone best at the largest size: one
    whose calls spread wide (`a_burst_on_top`) is as likely a burst, one with steady calls a
    curve that may still rise past the largest size the call budget (max_call_s) allowed; it is
    fitted with a note saying the ceiling is at least that (a steady rise and a burst at the
    largest size are one phenomenon to the fit, fitted either way). Not where
    larger sizes were measured and left out (`taken`: the ok rows, flagged or not; contended
    ones): their rate is unknown, and so is the rise. A GPU's plateau keeps its median: its
    points move with the clock."""
    out = []
    for dtype, g in rows[rows.flop_per_s > 0].groupby("dtype"):
        v = g.flop_per_s.to_numpy(float)
        top = top_plateau(v)
        host = bool(best_timed(g).all())
        note = None
        if host and top.sum() == 1:
            past = past_its_peak(g, top)
            if not past and not larger_sizes_left_out(g, top, taken):  # say what it may be
                at = f" (n = {g.n.to_numpy(float)[top][0]:g})" if "n" in g else ""
                note = (f"its best point{at} stands alone on top with its calls spread wide "
                        "(noisy): read as a burst, not a curve still rising; the next best "
                        "point is its interval's low end" if a_burst_on_top(g, top) else
                        f"its best point{at} stands alone on top at the sweep's largest size, "
                        "its calls steady: the curve may still rise past the sizes the call "
                        "budget (max_call_s) allowed, so the ceiling is at least this; the next "
                        "best point is its interval's low end")
            if past or note:  # the lone top and the next best: its interval
                top = top_two(v)
        plateau = v[top]
        if plateau.size < MIN_POINTS:
            out.append(missing_row(ceiling, "FLOP/s", f"a single point on the top plateau of "
                                   f"{what} (a ceiling needs at least two)", dtype))
            continue
        value, ci, method = plateau_value(plateau, host, f" of {what}")
        out.append(ceiling_row(ceiling, value, "FLOP/s", method, int(plateau.size), dtype, ci,
                               points=g[top], note=note))
    return out
