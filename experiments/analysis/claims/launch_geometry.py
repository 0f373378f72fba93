"""Kernel, thread, warp, block and SM: time follows whole waves of blocks over the SMs.

Two models of time against grid size compete on points each did not see (leave-one-out): a step
per whole wave, ceil(blocks / SMs), and a line in the block count.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from experiments.analysis.dataset import param
from experiments.analysis.claims.base import NotMeasurable, Result, claim, section

SECTION = section("launch", "Kernel, thread, warp, block, SM", "launch")
MIN_GRIDS = 4  # a curve needs this many grid sizes
BETTER = 0.5  # whole waves' left-out error at most this share of the block-count line's...
EXPLAINS = 0.5  # ...and at most this share of the time's variance (they explain the time)


def launch_waves(rows: pd.DataFrame) -> pd.Series:
    """Waves of each launch row: params.waves, else blocks (n) / SM count."""
    waves = param(rows, "waves")
    for key in ("sm_count", "sms", "num_sms"):
        sms = param(rows, key)
        waves = waves.fillna(rows.n / sms)
    return pd.to_numeric(waves, errors="coerce")


def _groups(rows: pd.DataFrame) -> list:
    keys = ["dtype"] + [k for k in ("variant", "op") if rows[k].nunique() > 1]
    warps = param(rows, "num_warps")
    return [rows[k] for k in keys] + ([warps.fillna(-1)] if warps.notna().any() else [])


def loo_error(x: np.ndarray, y: np.ndarray) -> float:
    """Mean squared leave-one-out error of a straight-line fit of y on x."""
    err = []
    for i in range(len(x)):
        keep = np.arange(len(x)) != i
        if np.ptp(x[keep]) == 0:
            err.append(np.var(y))  # a model that cannot be fitted explains nothing
            continue
        fit = np.polyfit(x[keep], y[keep], 1)
        err.append((np.polyval(fit, x[i]) - y[i]) ** 2)
    return float(np.mean(err))


@claim("C20", SECTION,
       en="(Section announced, no text) kernel, thread, warp, thread block and SM.",
       zh="kernel、thread、warp、thread block 和 SM（文章只有标题）",
       prediction=lambda: f"time grows in steps: on curves of {MIN_GRIDS} grid sizes or more, "
                          f"predicted on points left out of the fit, whole waves ceil(blocks / "
                          f"SMs) err at most {BETTER:g}x as much as a line in the block count, "
                          f"and at most {EXPLAINS:.0%} of the time's variance.",
       fails_if=lambda: f"on the curves of {MIN_GRIDS} grid sizes or more, whole waves' left-out "
                        f"error exceeds {BETTER:g}x the block-count line's (no wave "
                        f"quantisation) or {EXPLAINS:.0%} of the time's variance (the steps do "
                        "not explain the time).",
       experiments=("launch",), limits=("MIN_GRIDS", "BETTER", "EXPLAINS"))
def c20(s):
    s.need_gpu("waves of thread blocks over SMs exist only on a GPU")
    rows = s.exp("launch")
    waves = launch_waves(rows)
    if waves.isna().all():
        raise NotMeasurable("launch rows give neither params.waves nor an SM count")
    rows = rows.assign(waves=waves).dropna(subset=["waves"])
    step, line, var, curves = [], [], [], 0
    for _, g in rows.groupby(_groups(rows)):
        if g.waves.nunique() < MIN_GRIDS:
            continue
        curves += 1
        y = g.time_s.to_numpy(float)
        step.append(loo_error(np.ceil(g.waves.to_numpy(float) - 1e-9), y))
        line.append(loo_error(g.waves.to_numpy(float), y))
        var.append(float(np.var(y)))
    if not curves:
        raise NotMeasurable(f"no launch curve with {MIN_GRIDS} or more grid sizes")
    ratio = float(np.sum(step) / np.sum(line))
    explained = float(np.sum(step) / np.sum(var)) if np.sum(var) > 0 else math.inf
    return Result(ratio <= BETTER and explained <= EXPLAINS,
                  f"{curves} curve(s): leave-one-out squared error of the wave-step model is "
                  f"{ratio:.2f}x the block-count line's and {explained:.0%} of the time's "
                  "variance", "LOO error, waves / blocks", ratio,
                  f"<= {BETTER:g}, and <= {EXPLAINS:.0%} of the variance, on curves of >= "
                  f"{MIN_GRIDS} grid sizes",
                  "launch: wave and warp sweeps", len(rows))
