"""What every fit of a ceiling shares: the top plateau of a curve, the value it stands for (its
median with a bootstrap interval; on a CPU timed by the host's clock, its best point), and the
row a ceiling (fitted or not) becomes. analysis/roofline.py says the methods."""

from __future__ import annotations

import inspect
import math
import statistics

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
HOST_CLOCK = "perf_counter"  # the timer of the CPU kernels' points (core/timer.py)


def best_timed(rows):
    """Per row: a CPU point timed by the host's clock, with a best time (roofline.fit_view)."""
    import pandas as pd

    if "time_s_min" not in rows or rows.empty:
        return pd.Series(False, index=rows.index)
    return ((rows.device_kind == "cpu") & (rows.timer == HOST_CLOCK) & (rows.time_s_min > 0)
            & (rows.time_s > 0)).fillna(False).astype(bool)


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


def plateau_value(values, host: bool, of: str = "") -> tuple[float, tuple[float, float], str]:
    """(value, interval, method) of a plateau's points (`of`: " of triad", say). Host-clocked
    CPU points: the best point, the plateau's range as its interval. Their rates are best times
    already (fit_view), and load only ever slows one: on a shared host, points of one size can
    differ twofold seconds apart as the neighbours come and go, so a median over points reads
    how busy the neighbours were. STREAM and mixbench-cpu report their best too. A GPU's plateau
    keeps its median: its spread is the device's own (clocks moving under the power cap), which
    a ceiling must not hide."""
    v = np.asarray(values, dtype=float)
    if host:
        return float(v.max()), (float(v.min()), float(v.max())), \
            f"best point of the top plateau{of} (host-clocked; interval: the plateau's range)"
    return float(np.median(v)), bootstrap_median(v), f"median of the top plateau{of}"


def top_two(values) -> np.ndarray:
    """Mask of the MIN_POINTS highest points: a lone top point and the next best, its interval.
    Fewer points than that: all of them (the caller's MIN_POINTS check says "not fitted")."""
    v = np.asarray(values, dtype=float)
    if v.size < MIN_POINTS:
        return np.ones(v.shape, dtype=bool)
    return v >= np.sort(v)[-MIN_POINTS]


def top_plateau(values, host: bool = False, sizes=None) -> np.ndarray:
    """Mask of the points on the top plateau of a curve. Host-clocked points (`host`): a lone top
    point is no outlier (load only slows one), so it and the next best make the plateau; with
    `sizes` (a cache window's working sets), a lone top size likewise takes the next size's best
    (a cache level's best can sit at one size, a fifth above its others: without the next size
    the plateau spans one size and the level goes unfitted)."""
    v = np.asarray(values, dtype=float)
    top = v >= TOP * np.quantile(v, 0.9)
    if host and top.sum() < MIN_POINTS <= v.size:
        top = top_two(v)
    if host and sizes is not None:
        s = np.asarray(sizes)
        if np.unique(s[top]).size < 2 <= np.unique(s).size:
            top |= v >= v[s != s[top][0]].max()
    return top


def _median(points, column) -> float:
    return (float(points[column].median()) if points is not None and column in points
            and points[column].notna().any() else math.nan)


def cpu_conditions(points) -> dict:
    """Of a CPU plateau's points: their median clock (the system's, and `core_mhz` and
    `fma_mhz`, the ones the cores and their FMA units counted after each point:
    kernels/cpu_clock.py) and the most physical cores they ran on (params.cores), which the
    silicon's peak reads (analysis/silicon.py)."""
    if points is None or "device_kind" not in points or not (points.device_kind == "cpu").all():
        return {}
    import pandas as pd

    from experiments.analysis.dataset import params

    given = params(points)

    def numbers(key):
        return pd.to_numeric(given[key], errors="coerce").dropna() if key in given else ()

    cores, core, fma = numbers("cores"), numbers("core_mhz"), numbers("fma_mhz")
    return {"cpu_freq_mhz": _median(points, "cpu_freq_mhz"),
            "cores": int(max(cores)) if len(cores) else None,
            "core_mhz": float(statistics.median(core)) if len(core) else math.nan,
            "fma_mhz": float(statistics.median(fma)) if len(fma) else math.nan}


def ceiling_row(ceiling, value, unit, method, n, dtype=None, ci=(math.nan, math.nan), points=None,
         **extra):
    """A fitted ceiling; `points` (the rows on its plateau) give the clock and power it ran at."""
    cond = {c: _median(points, c) for c in CONDITIONS} | cpu_conditions(points)
    return {"ceiling": ceiling, "dtype": dtype, "value": value, "unit": unit,
            "ci_low": ci[0], "ci_high": ci[1], "method": method, "n_points": n} | cond | extra


# A ceiling's interval is a promise about a repeat run on the same machine: no narrower than
# the run-to-run spread measured by repeating the default sweep (docs/benchmarks.md, "Repeat
# runs"): a repeat's value within [value / (1 + f), value x (1 + f)], f per device kind and kind
# of ceiling, the largest ratio seen between repeats rounded up to 0.05. The points of one run
# cannot show it: a run's minutes share the machine's state (clocks, neighbours). "workload": a
# workload's time per call (rooflab compare), whose 10-90 % spread within a run says as little.
RUN_TO_RUN = {
    # a CPU's small calls move up to 2x between repeats: oneDNN's choices, threads, alignment
    "cpu": {"cache": 0.35, "dram": 0.75, "fma_sweep_bw": 1.45, "gemm": 0.25, "fma": 0.65,
            "latency": 1.10, "eager_launch": 1.10, "workload": 1.15},
    # a GPU's eager launch is the host's work, so it moves with the host CPU as a graph's does not
    "gpu": {"cache": 0.15, "dram": 0.05, "fma_sweep_bw": 0.05, "gemm": 0.05, "fma": 0.05,
            "latency": 0.15, "eager_launch": 0.55, "workload": 0.20},
}
FAMILY = {"l1_bw": "cache", "l2_bw": "cache", "l3_bw": "cache", "dram_bw": "dram",
          "intensity_bw": "fma_sweep_bw", "matrix_flops": "gemm", "vector_flops": "fma",
          "latency_graph": "latency", "latency_eager": "eager_launch"}


def floor_kind(device_kind: str) -> str:
    """RUN_TO_RUN's key for a device kind: "cpu", else "gpu" (cuda, and any accelerator)."""
    return "cpu" if device_kind == "cpu" else "gpu"


def repeatable(c: dict, device_kind: str) -> dict:
    """Ceiling row `c` with its interval widened to at least RUN_TO_RUN around its value (a
    ridge's, a ratio of two ceilings, is widened where it is made from theirs)."""
    f = RUN_TO_RUN[floor_kind(device_kind)].get(FAMILY.get(c["ceiling"]))
    v = float(c["value"])
    if f is None or not math.isfinite(v):
        return c
    lo, hi = c["ci_low"], c["ci_high"]
    lo = v / (1 + f) if not math.isfinite(lo) else min(lo, v / (1 + f))
    hi = v * (1 + f) if not math.isfinite(hi) else max(hi, v * (1 + f))
    return c | {"ci_low": lo, "ci_high": hi}


def missing_row(ceiling, unit, note, dtype=None):
    return ceiling_row(ceiling, math.nan, unit, "not fitted", 0, dtype, note=note)
