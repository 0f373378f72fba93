"""GEMM TFLOP/s per dtype against the datasheet, and the error against float64."""

from __future__ import annotations

import seaborn as sns

from experiments.analysis import datasheets
from experiments.report.figures.common import Grid, figure, legend_right, log_ticks, palette, ticks_at, title


@figure(where=lambda r: r[r.flop_per_s > 0], missing="no matmul rows", panels=2,
        panel=(4.5, 4.2))
def matmul(g: Grid):
    colors = palette(g.rows.dtype)
    for (ax, ax_err), system, r in g:
        r = r.assign(tflops=r.flop_per_s / 1e12)
        sns.lineplot(data=r, x="n", y="tflops", hue="dtype", palette=colors, marker="o",
                     estimator="median", errorbar=None, ax=ax)
        sheet = datasheets.find(g.inp.sheets, r.device_name.iloc[0])
        if sheet is not None:
            for dtype in r.dtype.unique():
                peak = sheet.peak("matrix", dtype)
                if peak:
                    ax.axhline(peak / 1e12, color=colors[dtype], ls="--", lw=0.9, alpha=0.8)
        ax.set(xscale="log", yscale="log", xlabel="matrix side n (n x n @ n x n)",
               ylabel="TFLOP/s")
        ticks_at(ax.xaxis, r.n)
        log_ticks(ax.yaxis)
        title(ax, "dashed: datasheet peak" if sheet is not None else
              "no datasheet entry matches this device")
        e = r[r.rel_error > 0]
        if e.empty:
            ax_err.text(0.5, 0.5, "no error against float64 recorded", ha="center",
                        transform=ax_err.transAxes)
        else:
            sns.lineplot(data=e, x="n", y="rel_error", hue="dtype", palette=colors, marker="o",
                         estimator="median", errorbar=None, ax=ax_err, legend=False)
            ax_err.set(xscale="log", yscale="log")
            ticks_at(ax_err.xaxis, e.n)
            # 1e-3, not 10^-3: a superscript would be the figure's smallest text
            log_ticks(ax_err.yaxis, lambda v, _: f"{v:.0e}".replace("e-0", "e-"))
        ax_err.set(xlabel="matrix side n", ylabel="relative error vs float64")
        title(ax_err, "error against a float64 product (same colours)")
        legend_right(ax_err, source=ax, title="dtype")  # right of the pair, not between
