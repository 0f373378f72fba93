"""Bandwidth against working-set size, with the cache levels and the fitted plateaus."""

from __future__ import annotations

import math

import seaborn as sns

from experiments.analysis.units import qty
from experiments.report.figures.common import (NOTE, Grid, bytes_label, bytes_ticks, ceiling_rows, figure, legend_right,
                     log_ticks, palette, title)


@figure(where=lambda r: r[r.byte_per_s > 0], missing="no bandwidth rows",
        panel=(8.0, 5.2))
def bandwidth(g: Grid):
    colors = palette(g.rows.op)
    for ax, system, r in g:
        r = r.assign(gbps=r.byte_per_s / 1e9)
        sns.lineplot(data=r, x="working_set_bytes", y="gbps", hue="op", style="dtype",
                     palette=colors, markers=True, dashes=False, markersize=5, lw=1.1,
                     estimator="median", errorbar=None, ax=ax)
        ax.set(xscale="log", yscale="log", xlabel="working set (all operands of one call)",
               ylabel="bandwidth (GB/s)")
        bytes_ticks(ax.xaxis, 4)
        ax.tick_params(axis="x", labelrotation=30)
        facts = g.inp.ds.facts(system)
        for name, size in sorted((facts.get("cache_bytes") or {}).items(), key=lambda kv: kv[1]):
            if r.working_set_bytes.min() / 2 <= size <= r.working_set_bytes.max() * 2:
                ax.axvline(size, color="0.4", ls=":", lw=1)
                ax.annotate(f"{name} {bytes_label(size)}", (size, 0),
                            xycoords=("data", "axes fraction"), xytext=(3, 4),
                            textcoords="offset points", fontsize=NOTE, color="0.3")
        ceil = ceiling_rows(g.inp, system)
        for _, c in ceil[(ceil.unit == "B/s") & (ceil.ceiling != "intensity_bw")].iterrows():
            lo, hi = c.ws_min / 1.2, c.ws_max * 1.2  # the sizes on the plateau
            ax.hlines(c.value / 1e9, lo, hi, color="black", lw=2.5, alpha=0.85, zorder=5)
            ax.annotate(f"{c.ceiling.split('_')[0].upper()} {qty(c.value, 'B/s')}",
                        (math.sqrt(lo * hi), c.value / 1e9), xytext=(0, 6),
                        textcoords="offset points", ha="center", fontsize=NOTE, weight="bold",
                        zorder=6, bbox={"boxstyle": "round,pad=0.15", "fc": "white",
                                        "ec": "none", "alpha": 0.8})
        ax.set_ylim(top=ax.get_ylim()[1] * 1.4)  # room for the plateau labels
        log_ticks(ax.yaxis)
        title(ax, "lines: median per size; black bars: fitted plateaus")
        legend_right(ax)
