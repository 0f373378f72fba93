"""What every fit of a ceiling shares: the top plateau of a curve, the bootstrap interval of its
median, and the row a ceiling (fitted or not) becomes. analysis/roofline.py says the methods."""

from __future__ import annotations

import inspect
import math

import numpy as np
from scipy import stats

TOP = 0.9  # plateau: within 10 % of the window's 90th percentile
N_BOOT = 1000
SEED = 0

# scipy >= 1.15 takes `rng`, older ones `random_state` (deprecated later): use what exists
_RNG = "rng" if "rng" in inspect.signature(stats.bootstrap).parameters else "random_state"
# Conditions a plateau's points ran at (medians), where the rows recorded them.
CONDITIONS = ("sm_clock_mhz", "power_w")
MIN_POINTS = 2  # no ceiling from a single point


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


def ceiling_row(ceiling, value, unit, method, n, dtype=None, ci=(math.nan, math.nan), points=None,
         **extra):
    """A fitted ceiling; `points` (the rows on its plateau) give the clock and power it ran at."""
    cond = {c: float(points[c].median()) if points is not None and c in points
            and points[c].notna().any() else math.nan for c in CONDITIONS}
    return {"ceiling": ceiling, "dtype": dtype, "value": value, "unit": unit,
            "ci_low": ci[0], "ci_high": ci[1], "method": method, "n_points": n} | cond | extra


def missing_row(ceiling, unit, note, dtype=None):
    return ceiling_row(ceiling, math.nan, unit, "not fitted", 0, dtype, note=note)
