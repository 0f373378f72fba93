"""The interactive roofline: Bokeh, its script inlined once per page, so the report stays one
offline file (no fetch at view time). Zoom and pan, hover for a point's identity and numbers,
click a legend entry to hide a system's roofs, a workload or a kind of point.

Why Bokeh: it inlines only what a page uses (its core, 1.3 MB; Plotly's one bundle is ~4.6 MB),
it is kept by NumFOCUS and installs from wheels on Python 3.11-3.13, and its legend hides what a
reader clicks without widgets or a server. The seaborn figures stay as the publication figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from experiments.analysis.units import qty

# whole calls, their aten ops at counted intensity, and the ops at FLOPs / bytes ncu measured at
# each memory level (the hierarchical roofline)
MARKERS = {"whole call": ("circle", 10, True), "aten op": ("triangle", 8, True),
           "op at DRAM bytes (ncu)": ("square", 8, False), "op at L2 bytes (ncu)": ("diamond", 9, False),
           "op at L1 bytes (ncu)": ("inverted_triangle", 8, False)}
HIDDEN_AT_START = {"op at L2 bytes (ncu)", "op at L1 bytes (ncu)"}  # a click away
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#17becf", "#bcbd22", "#7f7f7f"]
SYSTEM_STYLE = [("#222222", "solid"), ("#b2182b", "dashed"), ("#2166ac", "dotdash"),
                ("#4d9221", "dotted")]
SI_JS = """const u = UNIT; const p = [[1e15,'P'],[1e12,'T'],[1e9,'G'],[1e6,'M'],[1e3,'k'],[1,'']];
for (const [f, s] of p) { if (Math.abs(tick) >= f) return (+(tick / f).toPrecision(3)) + ' ' + s + u; }
return (+tick.toPrecision(3)) + ' ' + u;"""


@dataclass
class Roofs:
    """One system's roofline: memory levels (label, bytes/s) and compute roofs (label, FLOP/s)."""

    name: str
    memory: list[tuple[str, float]]
    compute: list[tuple[str, float]]


@dataclass
class Point:
    group: str  # the legend entry and colour: a workload and dtype
    kind: str  # a key of MARKERS
    intensity: float
    flop_per_s: float
    text: str  # the hover text
    extra: dict = field(default_factory=dict)


def available() -> bool:
    """Bokeh is a dependency; a bare environment without it still gets its report, unplotted."""
    try:
        import bokeh  # noqa: F401
    except ImportError:
        return False
    return True


def script() -> str:
    """Bokeh's own script, inline (once per page, before any plot)."""
    from bokeh.resources import Resources
    return Resources(mode="inline", components=["bokeh"]).render_js()


def _range(systems, points):
    xs = [p.intensity for p in points if p.intensity > 0] + [0.05, 500.0]
    for s in systems:
        low_bw = min((bw for _, bw in s.memory), default=None)
        xs += [p / low_bw for _, p in s.compute] if low_bw else []
    ys = [p.flop_per_s for p in points if p.flop_per_s > 0]
    ys += [v for s in systems for _, v in s.compute]
    ys += [bw * min(xs) for s in systems for _, bw in s.memory]
    return (min(xs) / 2, max(xs) * 2), (min(ys) / 2 if ys else 1e9, max(ys) * 2 if ys else 1e15)


def figure(systems: list[Roofs], points: list[Point], title: str = "", height: int = 560):
    """The Bokeh figure: every system's roofs, every point; None when there is nothing to draw."""
    from bokeh.models import (ColumnDataSource, CustomJSTickFormatter, HoverTool, Legend,
                              LegendItem)
    from bokeh.plotting import figure as bk_figure

    points = [p for p in points if p.intensity > 0 and p.flop_per_s > 0]
    if not available() or not points and not any(s.memory or s.compute for s in systems):
        return None
    # the view opens on what is shown at start (ncu's L2/L1 points are a click and a zoom away)
    (x_lo, x_hi), (y_lo, y_hi) = _range(systems, [p for p in points
                                                  if p.kind not in HIDDEN_AT_START] or points)
    fig = bk_figure(title=title, x_axis_type="log", y_axis_type="log", height=height,
                    sizing_mode="stretch_width", x_range=(x_lo, x_hi), y_range=(y_lo, y_hi),
                    tools="pan,wheel_zoom,box_zoom,reset,save", active_drag="pan",
                    active_scroll=None, toolbar_location="above")
    fig.xaxis.axis_label = "arithmetic intensity (FLOP/byte)"
    fig.yaxis.axis_label = "attained FLOP/s"
    fig.yaxis.formatter = CustomJSTickFormatter(code=SI_JS.replace("UNIT", "'FLOP/s'"))
    fig.xaxis.formatter = CustomJSTickFormatter(code=SI_JS.replace("UNIT", "''"))
    for axis in (fig.xaxis, fig.yaxis):
        axis.axis_label_text_font_size = axis.major_label_text_font_size = "13px"
        axis.axis_label_text_font_style = "normal"
    items, roof_renderers = [], []
    for i, s in enumerate(systems):
        color, dash = SYSTEM_STYLE[i % len(SYSTEM_STYLE)]
        # labels on the first system's roofs only: overlaid ones would print over each other
        # (the others are named by hover and the legend)
        renderers = _roofs(fig, s, (x_lo, x_hi), y_lo, color, dash, labelled=i == 0)
        roof_renderers += renderers[:1]
        if renderers:
            items.append(LegendItem(label=f"{s.name}: roofs", renderers=renderers))
    groups = list(dict.fromkeys(p.group for p in points))
    by_kind: dict[str, list] = {}
    for gi, group in enumerate(groups):
        color = PALETTE[gi % len(PALETTE)]
        renderers = []
        for kind, (marker, size, filled) in MARKERS.items():
            mine = [p for p in points if p.group == group and p.kind == kind]
            if not mine:
                continue
            src = ColumnDataSource({"x": [p.intensity for p in mine],
                                    "y": [p.flop_per_s for p in mine],
                                    "text": [p.text for p in mine]})
            r = fig.scatter("x", "y", source=src, marker=marker, size=size, line_color=color,
                            fill_color=color if filled else None, fill_alpha=0.75,
                            line_width=1.5, visible=kind not in HIDDEN_AT_START)
            if kind not in HIDDEN_AT_START:  # a legend entry greys out unless all it holds shows
                renderers.append(r)
            by_kind.setdefault(kind, []).append(r)
        items.append(LegendItem(label=group, renderers=renderers))
    if len(by_kind) > 1:  # a second way to toggle: by kind of point, its entry drawn in grey
        for kind, rs in by_kind.items():
            marker, size, filled = MARKERS[kind]
            key = fig.scatter([], [], marker=marker, size=size, line_color="#777",
                              fill_color="#777" if filled else None, line_width=1.5,
                              visible=kind not in HIDDEN_AT_START)
            items.append(LegendItem(label=kind, renderers=[*rs, key]))
    point_renderers = [r for rs in by_kind.values() for r in rs]
    if point_renderers:
        fig.add_tools(HoverTool(renderers=point_renderers, tooltips=[("", "@text")]))
    if roof_renderers:
        fig.add_tools(HoverTool(renderers=roof_renderers, tooltips=[("", "@label")],
                                line_policy="nearest"))
    ncols = 1 if len(items) <= 4 else 2 if len(items) <= 24 else 3
    legend = Legend(items=items, click_policy="hide", ncols=ncols,
                    label_text_font_size="12px", spacing=0, padding=4)
    fig.add_layout(legend, "below")
    # the legend below takes its rows out of the figure's height: add them, so many workloads
    # (torch's modules, say) leave the plot its full height
    fig.height = height + 20 * math.ceil(len(items) / ncols) + 12
    return fig


def _roofs(fig, s: Roofs, xr, y_lo, color, dash, labelled: bool = True) -> list:
    """One system's memory slopes and compute roofs as one line set (hover names each), with
    labels; returns the renderers (one legend entry hides them all)."""
    from bokeh.models import ColumnDataSource

    x_lo, x_hi = xr
    top = max((v for _, v in s.compute), default=None)
    xs, ys, labels = [], [], []
    for label, bw in s.memory:
        x_end = min(x_hi, top / bw) if top else x_hi
        x0 = max(x_lo, y_lo / bw)
        xs.append([x0, x_end]), ys.append([bw * x0, bw * x_end])
        labels.append(f"{s.name}: {label} {qty(bw, 'B/s')}")
    slowest = min((bw for _, bw in s.memory), default=None)
    for label, p in s.compute:
        x0 = max(x_lo, p / slowest) if slowest else x_lo
        xs.append([x0, x_hi]), ys.append([p, p])
        labels.append(f"{s.name}: {label} {qty(p, 'FLOP/s')}")
    if not xs:
        return []
    lines = fig.multi_line("xs", "ys", source=ColumnDataSource(
        {"xs": xs, "ys": ys, "label": labels}), line_color=color, line_dash=dash, line_width=2,
        hover_line_width=4)
    if not labelled:
        return [lines]
    # labels: memory at the slope's left end, compute at the right end; a compute label within
    # 30 % of the one above it is left to the hover (close dtypes would overprint)
    tx, ty, tt, align, base = [], [], [], [], []
    # memory labels: the lowest (DRAM) under its slope, the caches above theirs, each further
    # right along the plot, so that close parallel slopes (L2 ~1.4x DRAM) keep their labels apart
    span = math.log10(x_hi / x_lo)
    for i, (label, bw) in enumerate(sorted(s.memory, key=lambda m: m[1])):
        x = max(x_lo * 10 ** (span * (0.10 if i == 0 else 0.16 + 0.09 * i)), 1.5 * y_lo / bw)
        tx.append(x), ty.append(bw * x), tt.append(f"{label} {qty(bw, 'B/s')}")
        align.append("left" if i == 0 else "right"), base.append("top" if i == 0 else "bottom")
    last = math.inf
    for label, p in sorted(s.compute, key=lambda c: -c[1]):
        if p * 1.3 > last:
            continue
        last = p
        tx.append(x_hi / 1.15), ty.append(p), tt.append(f"{label} {qty(p, 'FLOP/s')}")
        align.append("right"), base.append("bottom")
    text = fig.text("x", "y", "text", source=ColumnDataSource(
        {"x": tx, "y": ty, "text": tt, "align": align, "base": base}),
        text_align="align", text_baseline="base", text_font_size="11px", text_color=color)
    return [lines, text]


def embed(figures: dict) -> tuple[str, dict]:
    """(one script, name -> div) for the figures that exist: the page holds the script once."""
    figures = {k: f for k, f in figures.items() if f is not None}
    if not figures:
        return "", {}
    from bokeh.embed import components

    script, divs = components(figures)
    return script, divs
