"""NCCL all-reduce, all-gather, reduce-scatter: bus bandwidth against size."""

from __future__ import annotations

import seaborn as sns

from experiments.analysis.dataset import param
from experiments.report.figures.common import Grid, bytes_ticks, figure, legend_right, log_ticks, palette, title


def _busbw(rows):
    rows = rows[rows.time_s > 0]
    rows = rows.assign(busbw=param(rows, "busbw_Bps") / 1e9)
    return rows[rows.busbw > 0]


@figure(where=_busbw, panel=(8.0, 5.0),
        missing="no ok collectives rows (needs a pool of two or more GPUs)")
def collectives(g: Grid):
    colors = palette(g.rows.op)
    for ax, system, r in g:
        sns.lineplot(data=r, x="bytes", y="busbw", hue="op", palette=colors, marker="o",
                     estimator="median", errorbar=None, ax=ax)
        ax.set(xscale="log", yscale="log", xlabel="size S (nccl-tests' bytes)",
               ylabel="bus bandwidth (GB/s)")
        bytes_ticks(ax.xaxis, 16)
        log_ticks(ax.yaxis)
        world = param(r, "world_size").dropna()
        title(ax, f"{int(world.iloc[0]) if len(world) else '?'} GPUs; busbw = algbw x "
              "2(n-1)/n (all-reduce), (n-1)/n (the others)")
        legend_right(ax, title="")
