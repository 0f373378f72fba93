"""x @ W time per step and tokens/s against batch, with the prediction from the ceilings."""

from __future__ import annotations

import seaborn as sns

from experiments.analysis.knees import gemv_rows
from experiments.analysis.units import qty
from experiments.report.figures.common import NOTE, Grid, figure, legend_right, log_ticks, palette, ticks_at, title


@figure(where=gemv_rows, missing="no decode rows (x @ W, op gemv_gemm, with a batch)",
        panels=2, panel=(8.0, 4.2), columns=1)  # one above the other: the legend is long
def decode(g: Grid):
    per_row, knees = g.inp.per_row, g.inp.knees
    pred = per_row.assign(curve=per_row.dtype + " C=" + per_row.C.astype(str))
    for (ax_t, ax_k), system, r in g:
        r = r.assign(curve=r.dtype + " C=" + r.n.astype("Int64").astype(str),
                     tokens=r.batch / r.time_s)
        p = pred[pred.system == system]
        colors = palette(r.curve)  # per system: its own few curves, distinct colours
        for ax, y, yp, label, unit in (
                (ax_t, "time_s", "time_pred", "time per step", "s"),
                (ax_k, "tokens", "tokens_pred", "tokens/s (batch / time per step)", "")):
            sns.lineplot(data=r, x="batch", y=y, hue="curve", palette=colors, marker="o",
                         estimator="median", errorbar=None, ax=ax, legend=ax is ax_k)
            for curve, c in p.groupby("curve"):
                ax.plot(c.batch, c[yp], color=colors[curve], ls="--", lw=1.1)
            ax.set(xscale="log", yscale="log", xlabel="batch b (sequences decoded together)",
                   ylabel=label)
            ticks_at(ax.xaxis, r.batch)
            log_ticks(ax.yaxis, lambda v, _, unit=unit: qty(v, unit, 3))
        k = knees[knees.system == system] if not knees.empty else knees
        for _, kn in k.iterrows():
            curve = f"{kn['dtype']} C={kn.C}"
            # a knee outside the measured batches is in the table, not drawn off the data
            if curve in colors and r.batch.min() <= kn.predicted <= r.batch.max():
                ax_t.axvline(kn.predicted, color=colors[curve], ls=":", lw=1.2)
        title(ax_t, "time per step of y = x @ W")
        title(ax_k, "throughput")
        legend_right(ax_k, title="dtype, C")
    g.fig.suptitle("solid: measured; dashed: predicted max(bytes/B, FLOPs/P) from the fitted "
                   "ceilings; dotted: predicted knee", fontsize=NOTE, x=0.01, ha="left",
                   color="0.3")
