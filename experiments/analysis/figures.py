"""The report's figures, one function per figure, each drawn from rows and fitted ceilings.

Every figure in catalog.FIGURES is always written (PNG and SVG): when its experiment has no rows
the file is a small placeholder that says which experiment is missing, so the workflow's outputs
stay fixed. Several systems (host/device) are drawn side by side, one column each.
"""

from __future__ import annotations

import math
import traceback
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from . import datasheets  # noqa: E402
from .catalog import FIGURES  # noqa: E402
from .claims.launch_geometry import launch_waves  # noqa: E402
from .dataset import Dataset, ok, param  # noqa: E402
from .decode import gemv_rows  # noqa: E402
from .units import si  # noqa: E402

PANEL = (6.4, 4.6)  # inches per panel
DPI = 150
DTYPE_ORDER = ["float64", "float32", "tf32", "float16", "bfloat16", "float8_e4m3"]


class Missing(Exception):
    """No data for this figure; the message says which experiment is missing."""


@dataclass
class Inputs:
    ds: Dataset
    ceilings: pd.DataFrame
    sheets: list
    per_row: pd.DataFrame  # decode prediction per row
    knees: pd.DataFrame


def _style():
    sns.set_theme(style="whitegrid", context="notebook", font_scale=0.95)
    plt.rcParams.update({"svg.fonttype": "none", "axes.titlesize": 11, "legend.fontsize": 8.5,
                         "legend.title_fontsize": 9, "figure.dpi": DPI})


def _bytes(x, _=None) -> str:
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if x >= f:
            v = x / f
            return f"{v:.0f} {unit}" if v >= 10 or v == int(v) else f"{v:.1f} {unit}"
    return f"{x:.0f} B"


def _num(v, _=None) -> str:
    return f"{v:g}"


def _log_ticks(axis, fmt=_num):
    """Label decades with `fmt`; label minor ticks too only when the axis spans < 2 decades
    (otherwise matplotlib's 2x10^2 style labels pile up)."""
    lo, hi = sorted(axis.get_view_interval())
    axis.set_major_formatter(FuncFormatter(fmt))
    decades = math.log10(hi / lo) if lo > 0 else 99
    keep = (2, 3, 5) if decades < 1 else (2, 5) if decades < 2 else ()

    def minor(v, pos=None):
        lead = round(v / 10 ** math.floor(math.log10(v) + 1e-9)) if v > 0 else 0
        return fmt(v, pos) if lead in keep else ""
    axis.set_minor_formatter(FuncFormatter(minor))


def _ticks_at(axis, values, fmt=lambda v, _=None: f"{v:.0f}"):
    """Ticks exactly at the measured sizes (thinned to at most 8)."""
    values = sorted(set(float(v) for v in values))
    step = max(1, math.ceil(len(values) / 8))
    axis.set_major_locator(FixedLocator(values[::step]))
    axis.set_major_formatter(FuncFormatter(fmt))
    axis.set_minor_formatter(NullFormatter())


def _bytes_ticks(axis, base: int):
    """Byte sizes (KiB, MiB ...) at every `base`-fold step, no minor labels."""
    axis.set_major_locator(LogLocator(base=base))
    axis.set_major_formatter(FuncFormatter(_bytes))
    axis.set_minor_formatter(NullFormatter())


def _absent(fig, inp: Inputs, drawn: list[str], what: str):
    """Say under the figure which systems have no data for it."""
    missing = [s for s in inp.ds.systems().system if s not in drawn]
    if missing:
        fig.supxlabel(f"not drawn for {', '.join(missing)}: {what}", fontsize=8.5, color="0.35",
                      ha="left", x=0.01)


# One colour per dtype in every figure (seaborn's colorblind palette)
_CB = sns.color_palette("colorblind", 10)
DTYPE_COLORS = {"float32": _CB[0], "tf32": _CB[2], "float16": _CB[1], "bfloat16": _CB[4],
                "float8_e4m3": _CB[3], "float64": _CB[7]}  # fp16 and bf16 far apart


def _palette(values) -> dict:
    """Colours for hue values: the fixed dtype colours, then the rest of the palette in order."""
    values = sorted(set(values), key=lambda v: (DTYPE_ORDER.index(v) if v in DTYPE_ORDER
                                                else len(DTYPE_ORDER), str(v)))
    if not all(v in DTYPE_COLORS for v in values):  # ops, curves...: the palette in order
        return dict(zip(values, sns.color_palette("colorblind", max(len(values), 1))))
    return {v: DTYPE_COLORS[v] for v in values}


def _systems(inp: Inputs, rows: pd.DataFrame) -> list[str]:
    """Systems (in dataset order) that have any of these rows."""
    return [s for s in inp.ds.systems().system if (rows.system == s).any()]


def _grid(nrows, ncols, panel=PANEL):
    fig, axes = plt.subplots(nrows, ncols, figsize=(panel[0] * ncols, panel[1] * nrows),
                             squeeze=False, layout="constrained")
    return fig, axes


def _legend_right(ax, **kw):
    handles, labels = ax.get_legend_handles_labels()
    if ax.get_legend():
        ax.get_legend().remove()
    if handles:
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False,
                  **kw)


def _legend_below(ax):
    """One legend under the axes, one column per seaborn group (hue, style), titles in bold."""
    handles, labels = ax.get_legend_handles_labels()
    if ax.get_legend():
        ax.get_legend().remove()
    groups = []
    for h, label in zip(handles, labels):
        if label in ("dtype", "experiment"):  # seaborn's group titles
            groups.append([label, []])
        elif not groups:
            groups.append(["", [(h, label)]])
        else:
            groups[-1][1].append((h, label))
    groups = [g for g in groups if g[1]]
    if not groups:
        return
    blank = Rectangle((0, 0), 1, 1, visible=False)
    rows = max(len(items) for _, items in groups) + 1
    entries, titles = [], []
    for title, items in groups:  # legends fill column by column: pad each group to `rows`
        titles.append(len(entries))
        entries += [(blank, title)] + items + [(blank, "")] * (rows - 1 - len(items))
    leg = ax.legend(*zip(*entries), ncol=len(groups), loc="upper center",
                    bbox_to_anchor=(0.5, -0.12), frameon=False, handletextpad=0.4,
                    columnspacing=2.0)
    for i in titles:
        leg.get_texts()[i].set_weight("bold")


def _title(ax, system, what=""):
    ax.set_title(f"{system}" + (f"\n{what}" if what else ""), loc="left")


def _ceiling_rows(inp, system):
    c = inp.ceilings
    return c[(c.system == system) & c.value.notna()]


# --- the figures ------------------------------------------------------------------------------

ROOFLINE_EXPERIMENTS = FIGURES["roofline"][2]  # timing rows are not rates of one kernel


def _dodge(values, span, gap=0.045):
    """log10 label heights for sorted values, at least `gap` of the axis span apart."""
    out = []
    for v in values:
        y = math.log10(v)
        out.append(max(y, out[-1] + gap * span) if out else y)
    return out


def roofline(inp: Inputs):
    pts = ok(inp.ds.rows)
    pts = pts[(pts.intensity > 0) & (pts.flop_per_s > 0)
              & pts.experiment.isin(ROOFLINE_EXPERIMENTS)]
    systems = _systems(inp, pts)
    if not systems:
        raise Missing("no ok rows with FLOPs and bytes (bandwidth, matmul, intensity or decode)")
    fig, axes = _grid(1, len(systems), (7.4, 5.6))
    dtype_colors = _palette(pd.concat([pts["dtype"], inp.ceilings["dtype"].dropna()]))
    diagonals = []  # labels placed after layout, along their lines
    for ax, system in zip(axes[0], systems):
        p = pts[pts.system == system]
        ceil = _ceiling_rows(inp, system)
        # colour = dtype, as the ceiling lines: a bf16 point is read against the bf16 ceiling
        sns.scatterplot(data=p, x="intensity", y="flop_per_s", hue="dtype", style="experiment",
                        palette=dtype_colors, s=26, alpha=0.7, edgecolor="none", ax=ax)
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
        for _, c in bws.sort_values("value").iterrows():
            main = c.ceiling == "dram_bw"
            ax.plot(x, np.minimum(c.value * x, roof), color="black" if main else "0.45",
                    lw=1.6 if main else 1.0, ls="-" if main else "-.", zorder=1)
            diagonals.append((ax, c.value, roof, 0.55 if main else 0.3,
                              f"{c.ceiling.split('_')[0].upper()} {si(c.value, 'B/s')}",
                              "black" if main else "0.35"))
        labels = []
        for _, c in flops.iterrows():
            dtype = c["dtype"]  # (c.dtype would be the Series' own dtype)
            start = c.value / base if base else xlo
            ls = "-" if c.ceiling == "matrix_flops" else ":"
            ax.hlines(c.value, start, xhi, color=dtype_colors[dtype], lw=1.5, ls=ls, zorder=1)
            kind = "GEMM" if c.ceiling == "matrix_flops" else "vector"
            labels.append((c.value, f"{dtype} {kind} {si(c.value, 'FLOP/s')}",
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
        for (v, text, color), y in zip(labels, _dodge([v for v, *_ in labels], span, 0.04)):
            ax.annotate(text, (1, 10**y), xycoords=("axes fraction", "data"), xytext=(4, 0),
                        textcoords="offset points", ha="left", va="center", fontsize=8,
                        color=color, annotation_clip=False)
        ax.set(xlabel="arithmetic intensity (FLOP/byte)", ylabel="attained FLOP/s")
        _log_ticks(ax.xaxis)
        _log_ticks(ax.yaxis, lambda v, _: si(v, "FLOP/s"))
        notes = ["solid: fitted ceilings; dashed: datasheet" if sheet is not None
                 else "no datasheet entry matches this device"]
        if flops.empty:
            notes.append("no compute ceiling fitted (no matmul or intensity rows)")
        _title(ax, system, "; ".join(notes))
        _legend_below(ax)
    _absent(fig, inp, systems, "no rows with FLOPs and bytes")
    fig.canvas.draw()  # final layout: now a slope's on-screen angle is known
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
                    fontsize=8, color=color)
    return fig


def bandwidth(inp: Inputs):
    rows = ok(inp.ds.rows)
    rows = rows[(rows.experiment == "bandwidth") & (rows.byte_per_s > 0)]
    systems = _systems(inp, rows)
    if not systems:
        raise Missing("no bandwidth rows")
    fig, axes = _grid(1, len(systems), (7.2, 4.8))
    colors = _palette(rows.op)
    for ax, system in zip(axes[0], systems):
        r = rows[rows.system == system].assign(gbps=lambda d: d.byte_per_s / 1e9)
        sns.lineplot(data=r, x="working_set_bytes", y="gbps", hue="op", style="dtype",
                     palette=colors, markers=True, dashes=False, markersize=5, lw=1.1,
                     estimator="median", errorbar=None, ax=ax)
        ax.set(xscale="log", yscale="log", xlabel="working set (all operands of one call)",
               ylabel="bandwidth (GB/s)")
        _bytes_ticks(ax.xaxis, 4)
        ax.tick_params(axis="x", labelrotation=30)
        facts = inp.ds.facts(system)
        for name, size in sorted((facts.get("cache_bytes") or {}).items(), key=lambda kv: kv[1]):
            if r.working_set_bytes.min() / 2 <= size <= r.working_set_bytes.max() * 2:
                ax.axvline(size, color="0.4", ls=":", lw=1)
                ax.annotate(f"{name} {_bytes(size)}", (size, 0), xycoords=("data", "axes fraction"),
                            xytext=(3, 4), textcoords="offset points", fontsize=8, color="0.3")
        ceil = _ceiling_rows(inp, system)
        for _, c in ceil[(ceil.unit == "B/s") & (ceil.ceiling != "intensity_bw")].iterrows():
            lo, hi = c.ws_min / 1.2, c.ws_max * 1.2  # the sizes on the plateau
            ax.hlines(c.value / 1e9, lo, hi, color="black", lw=2.5, alpha=0.85, zorder=5)
            ax.annotate(f"{c.ceiling.split('_')[0].upper()} {si(c.value, 'B/s')}",
                        (math.sqrt(lo * hi), c.value / 1e9), xytext=(0, 6),
                        textcoords="offset points", ha="center", fontsize=8.5, weight="bold",
                        zorder=6, bbox={"boxstyle": "round,pad=0.15", "fc": "white",
                                        "ec": "none", "alpha": 0.8})
        ax.set_ylim(top=ax.get_ylim()[1] * 1.4)  # room for the plateau labels
        _log_ticks(ax.yaxis)
        _title(ax, system, "lines: median per size; black bars: fitted plateaus")
        _legend_right(ax)
    _absent(fig, inp, systems, "no bandwidth rows")
    return fig


def matmul(inp: Inputs):
    rows = ok(inp.ds.rows)
    rows = rows[(rows.experiment == "matmul") & (rows.flop_per_s > 0)]
    systems = _systems(inp, rows)
    if not systems:
        raise Missing("no matmul rows")
    fig, axes = _grid(len(systems), 2, (6.2, 4.4))
    colors = _palette(rows.dtype)
    for (ax, ax_err), system in zip(axes, systems):
        r = rows[rows.system == system].assign(tflops=lambda d: d.flop_per_s / 1e12)
        sns.lineplot(data=r, x="n", y="tflops", hue="dtype", palette=colors, marker="o",
                     estimator="median", errorbar=None, ax=ax)
        sheet = datasheets.find(inp.sheets, r.device_name.iloc[0])
        if sheet is not None:
            for dtype in r.dtype.unique():
                peak = sheet.peak("matrix", dtype)
                if peak:
                    ax.axhline(peak / 1e12, color=colors[dtype], ls="--", lw=0.9, alpha=0.8)
        ax.set(xscale="log", yscale="log", xlabel="matrix side n (n x n @ n x n)",
               ylabel="TFLOP/s")
        _ticks_at(ax.xaxis, r.n)
        _log_ticks(ax.yaxis)
        _title(ax, system, "dashed: datasheet peak" if sheet is not None else
               "no datasheet entry matches this device")
        _legend_right(ax, title="dtype")
        e = r[r.rel_error > 0]
        if e.empty:
            ax_err.text(0.5, 0.5, "no error against float64 recorded", ha="center",
                        transform=ax_err.transAxes)
        else:
            sns.lineplot(data=e, x="n", y="rel_error", hue="dtype", palette=colors, marker="o",
                         estimator="median", errorbar=None, ax=ax_err, legend=False)
            ax_err.set(xscale="log", yscale="log")
            _ticks_at(ax_err.xaxis, e.n)
        ax_err.set(xlabel="matrix side n", ylabel="relative error vs float64")
        ax_err.set_title("error against a float64 product (same colours)", loc="left")
    _absent(fig, inp, systems, "no matmul rows")
    return fig


def decode(inp: Inputs):
    rows = gemv_rows(inp.ds.rows)
    systems = _systems(inp, rows)
    if not systems:
        raise Missing("no decode rows (x @ W, op gemv_gemm, with a batch)")
    fig, axes = _grid(len(systems), 2, (6.2, 4.4))
    rows = rows.assign(curve=rows.dtype + " C=" + rows.n.astype("Int64").astype(str),
                       tokens=rows.batch / rows.time_s)
    pred = inp.per_row.assign(curve=inp.per_row.dtype + " C=" + inp.per_row.C.astype(str))
    for (ax_t, ax_k), system in zip(axes, systems):
        r = rows[rows.system == system]
        p = pred[pred.system == system]
        colors = _palette(r.curve)  # per system: its own few curves, distinct colours
        for ax, y, yp, label, unit in (
                (ax_t, "time_s", "time_pred", "time per step", "s"),
                (ax_k, "tokens", "tokens_pred", "tokens/s (batch / time per step)", "")):
            sns.lineplot(data=r, x="batch", y=y, hue="curve", palette=colors, marker="o",
                         estimator="median", errorbar=None, ax=ax, legend=ax is ax_k)
            for curve, g in p.groupby("curve"):
                ax.plot(g.batch, g[yp], color=colors[curve], ls="--", lw=1.1)
            ax.set(xscale="log", yscale="log", xlabel="batch b (sequences decoded together)",
                   ylabel=label)
            _ticks_at(ax.xaxis, r.batch)
            _log_ticks(ax.yaxis, lambda v, _, unit=unit: si(v, unit, 3))
        k = inp.knees[inp.knees.system == system] if not inp.knees.empty else inp.knees
        for _, kn in k.iterrows():
            curve = f"{kn['dtype']} C={kn.C}"
            # a knee outside the measured batches is in the table, not drawn off the data
            if curve in colors and r.batch.min() <= kn.predicted <= r.batch.max():
                ax_t.axvline(kn.predicted, color=colors[curve], ls=":", lw=1.2)
        _title(ax_t, system, "time per step of y = x @ W")
        ax_k.set_title("throughput", loc="left")
        _legend_right(ax_k, title="dtype, C")
    fig.suptitle("solid: measured; dashed: predicted max(bytes/B, FLOPs/P) from the fitted "
                 "ceilings; dotted: predicted knee", fontsize=9, x=0.01, ha="left", color="0.3")
    _absent(fig, inp, systems, "no decode x @ W rows")
    return fig


def timing(inp: Inputs):
    rows = ok(inp.ds.rows)
    rows = rows[(rows.experiment == "timing") & (rows.time_s > 0)]
    kernel = rows[rows.op == "kernel"]
    systems = [s for s in _systems(inp, kernel)
               if (kernel[kernel.system == s].variant == "cuda_event").any()]
    if not systems:
        why = "no timing rows" if kernel.empty else \
            "timing rows have no cuda_event variant (CPU only: host clock is the only method)"
        raise Missing(why)
    fig, axes = _grid(len(systems), 3, (5.0, 4.2))
    colors = _palette(rows.variant.dropna())
    for (ax_r, ax_cv, ax_l), system in zip(axes, systems):
        k = kernel[kernel.system == system]
        ref = k[k.variant == "cuda_event"].groupby("n").time_s.median()
        k = k.assign(event_s=k.n.map(ref), ratio=lambda d: d.time_s / d.n.map(ref))
        sns.lineplot(data=k, x="event_s", y="ratio", hue="variant", palette=colors, marker="o",
                     errorbar=None, ax=ax_r, legend=False)
        ax_r.axhline(1, color="0.3", lw=0.8)
        ax_r.set(xscale="log", yscale="log", xlabel="kernel time by CUDA events",
                 ylabel="method's time / event time")
        _log_ticks(ax_r.xaxis, lambda v, _: si(v, "s"))
        _log_ticks(ax_r.yaxis)
        _title(ax_r, system, "below 1: the clock stopped before the kernel ended")
        sns.lineplot(data=k, x="event_s", y="cv", hue="variant", palette=colors, marker="o",
                     errorbar=None, ax=ax_cv)
        ax_cv.set(xscale="log", xlabel="kernel time by CUDA events",
                  ylabel="coefficient of variation (std / mean)")
        _log_ticks(ax_cv.xaxis, lambda v, _: si(v, "s"))
        ax_cv.set_title("spread of each method", loc="left")
        _legend_right(ax_cv, title="method")
        launch = rows[(rows.system == system) & (rows.op == "launch_overhead")]
        if launch.empty:
            ax_l.text(0.5, 0.5, "no launch_overhead rows", ha="center", transform=ax_l.transAxes)
        else:
            sns.barplot(data=launch.assign(us=launch.time_s * 1e6), x="variant", y="us",
                        color="0.55", ax=ax_l)
            ax_l.set(xlabel="", ylabel="time per launch (µs)")
        ax_l.set_title("launch overhead", loc="left")
    _absent(fig, inp, systems, "no timing rows with CUDA events (GPU only)")
    return fig


def _transfer_model(rows: pd.DataFrame, label: str):
    """(latency, bandwidth) of a variant: the experiment's transfer_model row, else our fit."""
    m = rows[(rows.op == "transfer_model") & (rows.variant == label)]
    lat, bw = param(m, "latency_s"), param(m, "bandwidth_Bps")
    if len(m) and pd.notna(lat.iloc[0]) and pd.notna(bw.iloc[0]):
        return float(lat.iloc[0]), float(bw.iloc[0])
    return None


def transfer(inp: Inputs):
    rows = ok(inp.ds.rows)
    rows = rows[rows.experiment == "transfer"]
    label = (rows.op + " " + rows.variant.fillna("")).str.strip()
    copies = rows[label.str.contains("h2d|d2h") & (rows.byte_per_s > 0)]
    copies = copies.assign(label=copies.variant.fillna(copies.op), gbps=copies.byte_per_s / 1e9)
    systems = _systems(inp, copies)
    if not systems:
        raise Missing("no ok host-device transfer rows (transfer experiment; needs a GPU)")
    fig, axes = _grid(len(systems), 2, (6.4, 4.4))
    colors = _palette(copies.label)
    for (ax, ax_c), system in zip(axes, systems):
        c = copies[copies.system == system]
        sns.lineplot(data=c, x="bytes", y="gbps", hue="label", palette=colors, marker="o",
                     lw=0, estimator="median", errorbar=None, ax=ax)
        x = np.logspace(math.log10(c.bytes.min()), math.log10(c.bytes.max()), 100)
        for lab in c.label.unique():
            model = _transfer_model(rows[rows.system == system], lab)
            if model:
                ax.plot(x, x / (model[0] + x / model[1]) / 1e9, color=colors[lab], lw=1.2)
        dram = _ceiling_rows(inp, system)
        dram = dram[dram.ceiling == "dram_bw"].value
        if len(dram):
            ax.axhline(dram.iloc[0] / 1e9, color="black", ls="--", lw=1)
            ax.annotate(f"device memory {si(dram.iloc[0], 'B/s')}", (0.02, dram.iloc[0] / 1e9),
                        xycoords=("axes fraction", "data"), xytext=(0, -12),
                        textcoords="offset points", fontsize=8)
        ax.set(xscale="log", yscale="log", xlabel="bytes per copy", ylabel="GB/s")
        _bytes_ticks(ax.xaxis, 16)
        _log_ticks(ax.yaxis)
        _title(ax, system, "lines: t = latency + bytes / bandwidth")
        _legend_right(ax, title="copy")
        cr = rows[(rows.system == system) & rows.op.str.startswith("create") & (rows.time_s > 0)]
        if cr.empty:
            ax_c.text(0.5, 0.5, "no create_on_device / create_then_move rows", ha="center",
                      transform=ax_c.transAxes)
        else:
            sns.lineplot(data=cr, x="bytes", y="time_s", hue="op", marker="o", errorbar=None,
                         ax=ax_c)
            ax_c.set(xscale="log", yscale="log", xlabel="tensor size", ylabel="time per tensor")
            _log_ticks(ax_c.yaxis, lambda v, _: si(v, "s"))
            _ticks_at(ax_c.xaxis, cr.bytes, _bytes)
            _legend_right(ax_c, title="")
        ax_c.set_title("create on the device vs create, then move", loc="left")
    _absent(fig, inp, systems, "no host-device copy rows (GPU only)")
    return fig


def launch(inp: Inputs):
    rows = ok(inp.ds.rows)
    rows = rows[(rows.experiment == "launch") & (rows.time_s > 0)]
    warps = param(rows, "num_warps")
    rows = rows.assign(waves=launch_waves(rows), us=rows.time_s * 1e6,
                       warps=warps.astype("Int64").astype(str) if warps.notna().any() else "-")
    rows = rows.dropna(subset=["waves"])
    systems = _systems(inp, rows)
    if not systems:
        raise Missing("no launch rows with waves (params.waves or an SM count; GPU only)")
    sweep = rows.op.str.contains("warp")  # the warp sweep, if the experiment has one
    fig, axes = _grid(len(systems), 2, (6.4, 4.4))
    for (ax, ax_w), system in zip(axes, systems):
        r = rows[(rows.system == system) & ~sweep]
        sns.lineplot(data=r, x="waves", y="us", hue="warps", marker="o", errorbar=None, ax=ax)
        for w in range(1, int(math.ceil(r.waves.max())) + 1):
            ax.axvline(w, color="0.6", ls=":", lw=0.8)
        ax.set(xlabel="grid size in waves (blocks / SMs)", ylabel="kernel time (µs)")
        _title(ax, system, "dotted: whole waves over the SMs")
        _legend_right(ax, title="warps per block")
        w = rows[(rows.system == system) & sweep]
        if w.empty:
            ax_w.text(0.5, 0.5, "no warp-sweep rows", ha="center", transform=ax_w.transAxes)
        else:
            w = w.assign(warps_n=pd.to_numeric(w.warps),
                         wave_label=w.waves.map(lambda v: f"{v:g}"))
            sns.lineplot(data=w, x="warps_n", y="us", hue="wave_label", marker="o",
                         errorbar=None, ax=ax_w)
            ax_w.set(xscale="log", xlabel="warps per block", ylabel="kernel time (µs)")
            _ticks_at(ax_w.xaxis, w.warps_n)
            _legend_right(ax_w, title="waves")
        ax_w.set_title("same work, fewer or more warps per block", loc="left")
    _absent(fig, inp, systems, "no launch rows (a GPU experiment)")
    return fig


# --- GPU to GPU (peer_copy, collectives) ----------------------------------------------------------

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


def peer_copy(inp: Inputs):
    rows = ok(inp.ds.rows)
    rows = rows[(rows.experiment == "peer_copy") & (rows.byte_per_s > 0)]
    systems = _systems(inp, rows)
    if not systems:
        raise Missing("no ok peer_copy rows (needs a pool of two or more GPUs with peer access)")
    fig, axes = _grid(len(systems), 2, (6.0, 4.6))
    for (ax_m, ax_s), system in zip(axes, systems):
        r = rows[rows.system == system]
        m = copy_matrix(r)
        op = "copy_engine" if (m.op == "copy_engine").any() else m.op.iloc[0] if len(m) else None
        if op is None:
            ax_m.text(0.5, 0.5, "no one-way (uni) rows", ha="center", transform=ax_m.transAxes)
        else:
            grid = m[m.op == op].pivot(index="src", columns="dst", values="gbps")
            ids = sorted(set(grid.index) | set(grid.columns))
            grid = grid.reindex(index=ids, columns=ids)
            sns.heatmap(grid, annot=True, fmt=".0f", cmap="viridis", cbar_kws={"label": "GB/s"},
                        linewidths=0.5, ax=ax_m)
            ax_m.set(xlabel="destination GPU", ylabel="source GPU")
            size = r[(r.op == op) & (r.variant == "uni")].bytes.max()
            _title(ax_m, system, f"{op}, one way, {_bytes(size)} per copy")
        r = r.assign(gbps=r.byte_per_s / 1e9, per_direction=np.where(
            r.variant == "bi", r.bytes / 2, r.bytes), curve=r.op + " " + r.variant)
        sns.lineplot(data=r, x="per_direction", y="gbps", hue="curve", marker="o",
                     estimator="median", errorbar=None, ax=ax_s)
        ax_s.set(xscale="log", yscale="log", xlabel="bytes per copy (each direction)",
                 ylabel="GB/s (bi: both directions)")
        _bytes_ticks(ax_s.xaxis, 16)
        _log_ticks(ax_s.yaxis)
        ax_s.set_title("median over pairs", loc="left")
        _legend_right(ax_s, title="")
    _absent(fig, inp, systems, "no ok peer_copy rows (one GPU or a CPU)")
    return fig


def collectives(inp: Inputs):
    rows = ok(inp.ds.rows)
    rows = rows[(rows.experiment == "collectives") & (rows.time_s > 0)]
    rows = rows.assign(busbw=param(rows, "busbw_Bps") / 1e9)
    rows = rows[rows.busbw > 0]
    systems = _systems(inp, rows)
    if not systems:
        raise Missing("no ok collectives rows (needs a pool of two or more GPUs)")
    fig, axes = _grid(1, len(systems), (6.8, 4.6))
    colors = _palette(rows.op)
    for ax, system in zip(axes[0], systems):
        r = rows[rows.system == system]
        sns.lineplot(data=r, x="bytes", y="busbw", hue="op", palette=colors, marker="o",
                     estimator="median", errorbar=None, ax=ax)
        ax.set(xscale="log", yscale="log", xlabel="size S (nccl-tests' bytes)",
               ylabel="bus bandwidth (GB/s)")
        _bytes_ticks(ax.xaxis, 16)
        _log_ticks(ax.yaxis)
        world = param(r, "world_size").dropna()
        _title(ax, system, f"{int(world.iloc[0]) if len(world) else '?'} GPUs; busbw = algbw x "
               "2(n-1)/n (all-reduce), (n-1)/n (the others)")
        _legend_right(ax, title="")
    _absent(fig, inp, systems, "no ok collectives rows (one GPU or a CPU)")
    return fig


DRAW = {"roofline": roofline, "bandwidth": bandwidth, "matmul": matmul, "decode": decode,
        "timing": timing, "transfer": transfer, "launch": launch}
DRAW |= {"peer_copy": peer_copy, "collectives": collectives}
assert set(DRAW) == set(FIGURES), "every catalog figure has a drawing function"


def placeholder(name: str, reason: str):
    fig = plt.figure(figsize=(6.4, 1.4), layout="constrained")
    fig.text(0.5, 0.62, f"{name}: not drawn", ha="center", fontsize=12, weight="bold")
    fig.text(0.5, 0.3, reason, ha="center", fontsize=10, wrap=True)
    return fig


def draw_all(inp: Inputs, outdir) -> dict[str, str | None]:
    """Write every figure as PNG and SVG; returns name -> reason it is a placeholder (or None)."""
    _style()
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    status = {}
    for name in FIGURES:
        try:
            fig, status[name] = DRAW[name](inp), None
        except Missing as exc:
            fig, status[name] = placeholder(name, str(exc)), str(exc)
        except Exception as exc:  # rows in a shape this figure does not know: say so, go on
            traceback.print_exc()
            plt.close("all")
            why = f"could not draw these rows ({type(exc).__name__}: {exc})"
            fig, status[name] = placeholder(name, why), why
        for ext in ("png", "svg"):
            fig.savefig(outdir / f"{name}.{ext}", dpi=DPI, bbox_inches="tight",
                        metadata={"Date": None} if ext == "svg" else None)
        plt.close(fig)
    return status
