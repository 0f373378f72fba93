"""Timing methods compared against CUDA events: host clock, synced, events; launch overhead."""

from __future__ import annotations

import seaborn as sns

from experiments.analysis.units import qty, words
from experiments.report.figures.common import (Grid, Missing, figure, literal, log_ticks,
                                               palette, title)


def _with_events(rows):
    """Timing rows of the systems whose kernels were timed by CUDA events too."""
    rows = rows[rows.time_s > 0]
    kernel = rows[rows.op == "kernel"]
    systems = set(kernel[kernel.variant == "cuda_event"].system)
    if not systems:
        raise Missing("no timing rows" if kernel.empty else "timing rows have no cuda_event "
                      "variant (CPU only: host clock is the only method)")
    return rows[rows.system.isin(systems)]


@figure(where=_with_events, missing="no timing rows with CUDA events (GPU only)",
        panels=4, panel=(4.5, 4.0))
def timing(g: Grid):
    colors = palette(g.rows.variant.dropna())
    for (ax_r, ax_cv, ax_l, ax_key), system, rows in g:
        k = rows[rows.op == "kernel"]
        ref = k[k.variant == "cuda_event"].groupby("n").time_s.median()
        k = k.assign(event_s=k.n.map(ref), ratio=lambda d: d.time_s / d.n.map(ref))
        sns.lineplot(data=k, x="event_s", y="ratio", hue="variant", palette=colors, marker="o",
                     errorbar=None, ax=ax_r, legend=False)
        ax_r.axhline(1, color="0.3", lw=0.8)
        ax_r.set(xscale="log", yscale="log", xlabel="kernel time by CUDA events",
                 ylabel="method's time / event time")
        log_ticks(ax_r.xaxis, lambda v, _: qty(v, "s"))
        log_ticks(ax_r.yaxis)
        title(ax_r, "below 1: the clock stopped before the kernel ended")
        sns.lineplot(data=k, x="event_s", y="cv", hue="variant", palette=colors, marker="o",
                     errorbar=None, ax=ax_cv)
        ax_cv.set(xscale="log", xlabel="kernel time by CUDA events",
                  ylabel="coefficient of variation (std / mean)")
        log_ticks(ax_cv.xaxis, lambda v, _: qty(v, "s"))
        title(ax_cv, "spread of each method")
        # the methods' legend gets the fourth slot, under the two panels it explains
        handles, labels = ax_cv.get_legend_handles_labels()
        if ax_cv.get_legend():
            ax_cv.get_legend().remove()
        ax_key.axis("off")
        if handles:
            ax_key.legend(handles, [literal(words(t)) for t in labels], title="method",
                          loc="upper left", frameon=False)
        launch = rows[rows.op == "launch_overhead"]
        if launch.empty:
            ax_l.text(0.5, 0.5, "no launch_overhead rows", ha="center", transform=ax_l.transAxes)
        else:
            sns.barplot(data=launch.assign(us=launch.time_s * 1e6), x="variant", y="us",
                        color="0.55", ax=ax_l)
            ax_l.set(xlabel="", ylabel="time per launch (µs)")
        title(ax_l, "launch overhead")
