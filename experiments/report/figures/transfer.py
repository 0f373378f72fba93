"""Host-device copies: GB/s against size with the fitted latency + bytes / bandwidth model."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import seaborn as sns

from experiments.analysis.dataset import param
from experiments.analysis.units import qty
from experiments.report.figures.common import (NOTE, Grid, bytes_label, bytes_ticks, ceiling_rows, figure, legend_right,
                     log_ticks, palette, ticks_at, title)


def _transfer_model(rows: pd.DataFrame, label: str):
    """(latency, bandwidth) of a variant: the experiment's transfer_model row, else our fit."""
    m = rows[(rows.op == "transfer_model") & (rows.variant == label)]
    lat, bw = param(m, "latency_s"), param(m, "bandwidth_Bps")
    if len(m) and pd.notna(lat.iloc[0]) and pd.notna(bw.iloc[0]):
        return float(lat.iloc[0]), float(bw.iloc[0])
    return None


def _copies(rows):
    label = (rows.op + " " + rows.variant.fillna("")).str.strip()
    copies = rows[label.str.contains("h2d|d2h") & (rows.byte_per_s > 0)]
    return copies.assign(label=copies.variant.fillna(copies.op), gbps=copies.byte_per_s / 1e9)


@figure(where=_copies, panels=2, panel=(8.0, 4.2), columns=1,
        missing="no ok host-device transfer rows (transfer experiment; needs a GPU)")
def transfer(g: Grid):
    colors = palette(g.rows.label)
    for (ax, ax_c), system, c in g:
        rows = g.all_rows[g.all_rows.system == system]
        sns.lineplot(data=c, x="bytes", y="gbps", hue="label", palette=colors, marker="o",
                     lw=0, estimator="median", errorbar=None, ax=ax)
        x = np.logspace(math.log10(c.bytes.min()), math.log10(c.bytes.max()), 100)
        for lab in c.label.unique():
            model = _transfer_model(rows, lab)
            if model:
                ax.plot(x, x / (model[0] + x / model[1]) / 1e9, color=colors[lab], lw=1.2)
        dram = ceiling_rows(g.inp, system)
        dram = dram[dram.ceiling == "dram_bw"].value
        if len(dram):
            ax.axhline(dram.iloc[0] / 1e9, color="black", ls="--", lw=1)
            ax.annotate(f"device memory {qty(dram.iloc[0], 'B/s')}", (0.02, dram.iloc[0] / 1e9),
                        xycoords=("axes fraction", "data"), xytext=(0, -14),
                        textcoords="offset points", fontsize=NOTE)
        ax.set(xscale="log", yscale="log", xlabel="bytes per copy", ylabel="GB/s")
        bytes_ticks(ax.xaxis, 16)
        log_ticks(ax.yaxis)
        title(ax, "lines: t = latency + bytes / bandwidth")
        legend_right(ax, title="copy")
        cr = rows[rows.op.str.startswith("create") & (rows.time_s > 0)]
        if cr.empty:
            ax_c.text(0.5, 0.5, "no create_on_device / create_then_move rows", ha="center",
                      transform=ax_c.transAxes, wrap=True)
        else:
            sns.lineplot(data=cr, x="bytes", y="time_s", hue="op", marker="o", errorbar=None,
                         ax=ax_c)
            ax_c.set(xscale="log", yscale="log", xlabel="tensor size", ylabel="time per tensor")
            log_ticks(ax_c.yaxis, lambda v, _: qty(v, "s"))
            ticks_at(ax_c.xaxis, cr.bytes, bytes_label)
            legend_right(ax_c)
        title(ax_c, "create on the device vs create, then move")

