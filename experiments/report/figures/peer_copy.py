"""GPU to GPU copies: the GB/s matrix per ordered pair, and GB/s against size per method."""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns

from experiments.analysis.dataset import ok, param
from experiments.report.figures.common import Grid, bytes_label, bytes_ticks, figure, legend_inside, log_ticks, title


def copy_matrix(rows: pd.DataFrame) -> pd.DataFrame:
    """GB/s of one-way copies (variant uni) at the largest size, src x dst, per method: the
    median over that size's rows of each ordered pair (the diagonal stays empty)."""
    r = ok(rows)
    r = r[(r.experiment == "peer_copy") & (r.variant == "uni") & (r.byte_per_s > 0)]
    if r.empty:
        return pd.DataFrame(columns=["op", "src", "dst", "gbps"])
    r = r[r.bytes == r.groupby("op").bytes.transform("max")]
    r = r.assign(src=param(r, "src").astype(int), dst=param(r, "dst").astype(int),
                 gbps=r.byte_per_s / 1e9)
    return r.groupby(["op", "src", "dst"], as_index=False).gbps.median()


@figure(where=lambda r: r[r.byte_per_s > 0], panels=2, panel=(4.5, 4.4),
        missing="no ok peer_copy rows (needs a pool of two or more GPUs with peer access)")
def peer_copy(g: Grid):
    for (ax_m, ax_s), system, r in g:
        m = copy_matrix(r)
        op = "copy_engine" if (m.op == "copy_engine").any() else m.op.iloc[0] if len(m) else None
        if op is None:
            ax_m.text(0.5, 0.5, "no one-way (uni) rows", ha="center", transform=ax_m.transAxes)
        else:
            grid = m[m.op == op].pivot(index="src", columns="dst", values="gbps")
            ids = sorted(set(grid.index) | set(grid.columns))
            grid = grid.reindex(index=ids, columns=ids)
            # colour from 0 GB/s: near-equal pairs look equal, not like a full colour range
            sns.heatmap(grid, annot=True, fmt=".0f", cmap="viridis", vmin=0,
                        cbar_kws={"label": "GB/s"}, linewidths=0.5, ax=ax_m)
            ax_m.set(xlabel="destination GPU", ylabel="source GPU")
            size = r[(r.op == op) & (r.variant == "uni")].bytes.max()
            title(ax_m, f"{op}, one way, {bytes_label(size)} per copy")
        r = r.assign(gbps=r.byte_per_s / 1e9, per_direction=np.where(
            r.variant == "bi", r.bytes / 2, r.bytes), curve=r.op + " " + r.variant)
        sns.lineplot(data=r, x="per_direction", y="gbps", hue="curve", marker="o",
                     estimator="median", errorbar=None, ax=ax_s)
        ax_s.set(xscale="log", yscale="log", xlabel="bytes per copy (each direction)",
                 ylabel="GB/s (bi: both directions)")
        bytes_ticks(ax_s.xaxis, 16)
        log_ticks(ax_s.yaxis)
        title(ax_s, "median over pairs")
        legend_inside(ax_s)
