"""Measured and datasheet rooflines with every experiment's points (each named on hover)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import seaborn as sns

from experiments.analysis import datasheets
from experiments.analysis.levels import STEP
from experiments.analysis.units import num, qty
from experiments.report.figures.common import (NOTE, Grid, bytes_label, ceiling_rows, figure, freeze_layout, legend_below,
                     log_ticks, palette, title, tooltips)


def _dodge(values, span, gap=0.045):
    """log10 label heights for sorted values, at least `gap` of the axis span apart."""
    out = []
    for v in values:
        y = math.log10(v)
        out.append(max(y, out[-1] + gap * span) if out else y)
    return out


def _point_name(r) -> str:
    """What a point is, for its tooltip: experiment, op, dtype, size, and where it lands."""
    size = (f"batch {r.batch:.0f}" if r.batch > 0 else f"n {r.n:.0f}" if r.experiment == "matmul"
            else f"ws {bytes_label(r.working_set_bytes)}" if r.working_set_bytes > 0 else "")
    what = " ".join(str(v) for v in (r.experiment, r.op, r.dtype, size) if v and v == v)
    return (f"{what}: {qty(r.flop_per_s, 'FLOP/s')} at {num(r.intensity)} FLOP/B"
            + (f", {qty(r.byte_per_s, 'B/s')}" if r.byte_per_s > 0 else ""))


def _name_points(ax, p: pd.DataFrame):
    """A tooltip per point of the scatter seaborn just drew, matched by its coordinates."""
    points = ax.collections[-1]
    names = {(x, y): _point_name(r) for r, x, y in zip(p.itertuples(), p.intensity, p.flop_per_s)}
    tooltips(points, [names.get((x, y), "") for x, y in points.get_offsets()])


@figure(where=lambda r: r[(r.intensity > 0) & (r.flop_per_s > 0)], panel=(8.0, 6.4),
        missing="no ok rows with FLOPs and bytes (bandwidth, matmul, intensity or decode)")
def roofline(g: Grid):
    inp = g.inp
    dtype_colors = palette(pd.concat([g.rows["dtype"], inp.ceilings["dtype"].dropna()]))
    diagonals = []  # labels placed after layout, along their lines
    for ax, system, p in g:
        ceil = ceiling_rows(inp, system)
        # colour = dtype, as the ceiling lines: a bf16 point is read against the bf16 ceiling
        sns.scatterplot(data=p, x="intensity", y="flop_per_s", hue="dtype", style="experiment",
                        palette=dtype_colors, s=30, alpha=0.7, edgecolor="none", ax=ax)
        _name_points(ax, p)
        ax.set(xscale="log", yscale="log")
        flops = ceil[ceil.unit == "FLOP/s"]
        sheet = datasheets.find(inp.sheets, p.device_name.iloc[0])
        peaks = [sheet.peak("matrix", d) or 0 for d in flops["dtype"].dropna().unique()] \
            if sheet is not None else []
        # diagonals stop at the top compute ceiling; with none fitted they are not clipped
        roof = flops.value.max() if len(flops) else math.inf
        bws = ceil[(ceil.unit == "B/s") & (ceil.ceiling != "intensity_bw")]
        dram = bws[bws.ceiling == "dram_bw"].value
        base = dram.iloc[0] if len(dram) else None
        xlo = p.intensity.min() / 3
        xhi = max(p.intensity.max() * 3, roof / base * 6 if base and len(flops) else 0)
        ylo, yhi = p.flop_per_s.min() / 3, max([p.flop_per_s.max()] + peaks + list(
            flops.value)) * 2.5
        x = np.logspace(math.log10(xlo), math.log10(xhi), 200)
        caches = []  # [(value, label)] of cache lines, one label for levels at one rate
        for _, c in bws.sort_values("value").iterrows():
            main = c.ceiling == "dram_bw"
            ax.plot(x, np.minimum(c.value * x, roof), color="black" if main else "0.45",
                    lw=1.6 if main else 1.0, ls="-" if main else "-.", zorder=1)
            text = f"{c.ceiling.split('_')[0].upper()} {qty(c.value, 'B/s')}"
            if main:
                diagonals.append((ax, c.value, roof, 0.55, text, "black"))
            elif caches and c.value < STEP * caches[-1][0]:  # kept_levels' pair
                caches[-1] = (c.value, f"{text}, {caches[-1][1]}")
            else:
                caches.append((c.value, text))
        diagonals += [(ax, v, roof, 0.3, text, "0.35") for v, text in caches]
        labels = []
        for _, c in flops.iterrows():
            dtype = c["dtype"]  # (c.dtype would be the Series' own dtype)
            start = c.value / base if base else xlo
            ls = "-" if c.ceiling == "matrix_flops" else ":"
            ax.hlines(c.value, start, xhi, color=dtype_colors[dtype], lw=1.5, ls=ls, zorder=1)
            kind = "GEMM" if c.ceiling == "matrix_flops" else "vector"
            labels.append((c.value, f"{dtype} {kind} {qty(c.value, 'FLOP/s')}",
                           dtype_colors[dtype]))
        if sheet is not None:
            name = f"datasheet: {sheet.name}"
            if sheet.bandwidth_Bps:
                top = max(peaks) if any(peaks) else roof
                ax.plot(x, np.minimum(sheet.bandwidth_Bps * x, top), color="0.5",
                        ls="--", lw=1.0, zorder=0, label=name)
                name = None
            for dtype in flops["dtype"].dropna().unique():
                unit = "matrix" if ((flops["dtype"] == dtype)
                                    & (flops.ceiling == "matrix_flops")).any() else "vector"
                peak = sheet.peak(unit, dtype)
                if peak:
                    start = peak / sheet.bandwidth_Bps if sheet.bandwidth_Bps else xlo
                    ax.hlines(peak, start, xhi, color=dtype_colors[dtype], ls="--", lw=0.9,
                              alpha=0.7, zorder=0, label=name)
                    name = None
        ax.set_xlim(xlo, xhi)
        ax.set_ylim(ylo, yhi)
        span = math.log10(yhi / ylo)
        labels.sort()
        # direct labels just outside the right edge, nudged apart so none overlap
        for (v, text, color), y in zip(labels, _dodge([v for v, *_ in labels], span, 0.05)):
            ax.annotate(text, (1, 10**y), xycoords=("axes fraction", "data"), xytext=(4, 0),
                        textcoords="offset points", ha="left", va="center", fontsize=NOTE,
                        color=color, annotation_clip=False)
        ax.set(xlabel="arithmetic intensity (FLOP/byte)", ylabel="attained FLOP/s")
        log_ticks(ax.xaxis)
        log_ticks(ax.yaxis, lambda v, _: qty(v, "FLOP/s"))
        notes = ["solid: fitted ceilings; dashed: datasheet" if sheet is not None
                 else "no datasheet entry matches this device"]
        if flops.empty:
            notes.append("no compute ceiling fitted (no matmul or intensity rows)")
        title(ax, "; ".join(notes))
        legend_below(ax)
    freeze_layout(g.fig)  # final layout: now a slope's on-screen angle is known
    for ax, bw, roof, where, text, color in diagonals:
        (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
        xr = min(roof / bw, x1)
        xs = 10 ** (math.log10(x0) + where * math.log10(xr / x0))
        if not y0 < bw * xs < y1:
            continue
        a, b = ax.transData.transform([(xs, bw * xs), (xs * 2, bw * xs * 2)])
        angle = math.degrees(math.atan2(b[1] - a[1], b[0] - a[0]))
        ax.annotate(text, (xs, bw * xs), xytext=(-4, 4), textcoords="offset points",
                    rotation=angle, rotation_mode="anchor", ha="left", va="bottom",
                    fontsize=NOTE, color=color)
