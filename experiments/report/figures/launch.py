"""Kernel time against grid size in waves over the SMs, and the same work over more warps."""

from __future__ import annotations

import math

import pandas as pd
import seaborn as sns

from experiments.analysis.claims.launch_geometry import launch_waves
from experiments.analysis.dataset import param
from experiments.report.figures.common import Grid, figure, legend_inside, ticks_at, title


def _waves(rows):
    rows = rows[rows.time_s > 0]
    warps = param(rows, "num_warps")
    rows = rows.assign(waves=launch_waves(rows), us=rows.time_s * 1e6,
                       warps=warps.astype("Int64").astype(str) if warps.notna().any() else "-")
    return rows.dropna(subset=["waves"])


@figure(where=_waves, panels=2, panel=(4.5, 4.2),
        missing="no launch rows with waves (params.waves or an SM count; GPU only)")
def launch(g: Grid):
    for (ax, ax_w), system, rows in g:
        sweep = rows.op.str.contains("warp")  # the warp sweep, if the experiment has one
        r = rows[~sweep]
        sns.lineplot(data=r, x="waves", y="us", hue="warps", marker="o", errorbar=None, ax=ax)
        for w in range(1, int(math.ceil(r.waves.max())) + 1):
            ax.axvline(w, color="0.6", ls=":", lw=0.8)
        ax.set(xlabel="grid size in waves (blocks / SMs)", ylabel="kernel time (µs)")
        title(ax, "dotted: whole waves over the SMs")
        legend_inside(ax, title="warps per block")
        w = rows[sweep]
        if w.empty:
            ax_w.text(0.5, 0.5, "no warp-sweep rows", ha="center", transform=ax_w.transAxes)
        else:
            w = w.assign(warps_n=pd.to_numeric(w.warps),
                         wave_label=w.waves.map(lambda v: f"{v:g}"))
            sns.lineplot(data=w, x="warps_n", y="us", hue="wave_label", marker="o",
                         errorbar=None, ax=ax_w)
            ax_w.set(xscale="log", xlabel="warps per block", ylabel="kernel time (µs)")
            ticks_at(ax_w.xaxis, w.warps_n)
            legend_inside(ax_w, title="waves")
        title(ax_w, "same work, fewer or more warps per block")
