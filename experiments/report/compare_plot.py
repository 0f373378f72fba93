"""`rooflab compare`'s overlaid roofline (Bokeh): A and B each in their own colour family, line
dash and marker, every roof of both labelled ("A: DRAM 4.29 TB/s"), a workload the same colour
on both sides so that its two points read as one pair; a legend entry hides a side or a
workload, and every hover names its side and machine."""

from __future__ import annotations

import math

from experiments.analysis.units import qty
from experiments.report import interactive

# side -> (roof colours, one per system of the side; roof dash; point marker; filled)
SIDES = {"A": (("#1f4e9c", "#5b8fd6", "#0b2a5b"), "solid", "circle", True),
         "B": (("#c2410c", "#f08a4b", "#7c2d12"), "dashed", "square", False)}
CLOSE = 1.3  # two roofs of a side within this factor: their labels are set apart along x


def _range(roofs, points):
    xs = [p.intensity for p in points] + [0.05, 500.0]
    for r in roofs:
        low = min((bw for _, bw in r.memory), default=None)
        xs += [p / low for _, p in r.compute] if low else []
    ys = [p.flop_per_s for p in points] + [v for r in roofs for _, v in r.compute]
    ys += [bw * min(xs) for r in roofs for _, bw in r.memory]
    return (min(xs) / 2, max(xs) * 2), (min(ys) / 2 if ys else 1e9, max(ys) * 2 if ys else 1e15)


def _labels(side: str, roofs, x_range, y_lo):
    """Where each roof's label goes: A's above its line, B's below, so that the same roof on
    both sides keeps both labels; close roofs of one side step along x."""
    x_lo, x_hi = x_range
    span = math.log10(x_hi / x_lo)
    above = side == "A"
    out = []
    for r in roofs:
        for i, (label, bw) in enumerate(sorted(r.memory, key=lambda m: m[1])):
            x = max(x_lo * 10 ** (span * (0.06 + 0.08 * i + (0 if above else 0.04))),
                    1.5 * y_lo / bw)
            out.append((x, bw * x, f"{side}: {label} {qty(bw, 'B/s')}",
                        "right" if above else "left"))
        slowest = min((bw for _, bw in r.memory), default=None)
        last, step = math.inf, 0
        for label, p in sorted(r.compute, key=lambda c: -c[1]):
            step = step + 1 if p * CLOSE > last else 0
            last = p
            ridge = p / slowest if slowest else x_lo
            x = max(x_hi / 1.15 / 4 ** step, ridge * 1.2)
            out.append((x, p, f"{side}: {label} {qty(p, 'FLOP/s')}", "right"))
    return out


def figure(sides: dict, height: int = 620):
    """sides: "A"/"B" -> (label, [Roofs], [Point]); the Bokeh figure, or None with nothing to
    draw or no Bokeh."""
    if not interactive.available():
        return None
    from bokeh.models import (ColumnDataSource, CustomJSTickFormatter, HoverTool, Legend,
                              LegendItem)
    from bokeh.palettes import Category10, Category20
    from bokeh.plotting import figure as bk_figure

    all_roofs = [r for _, roofs, _ in sides.values() for r in roofs]
    all_points = [p for _, _, points in sides.values() for p in points
                  if p.intensity > 0 and p.flop_per_s > 0]
    if not all_points and not any(r.memory or r.compute for r in all_roofs):
        return None
    (x_lo, x_hi), (y_lo, y_hi) = _range(all_roofs, all_points)
    fig = bk_figure(x_axis_type="log", y_axis_type="log", height=height,
                    sizing_mode="stretch_width", x_range=(x_lo, x_hi), y_range=(y_lo, y_hi),
                    tools="pan,wheel_zoom,box_zoom,reset,save", active_drag="pan",
                    active_scroll=None, toolbar_location="above")
    fig.xaxis.axis_label = "arithmetic intensity (FLOP/byte)"
    fig.yaxis.axis_label = "attained FLOP/s"
    fig.yaxis.formatter = CustomJSTickFormatter(code=interactive.SI_JS.replace("UNIT", "'FLOP/s'"))
    fig.xaxis.formatter = CustomJSTickFormatter(code=interactive.SI_JS.replace("UNIT", "''"))
    groups = list(dict.fromkeys(p.group for p in all_points))
    palette = Category10[10] if len(groups) <= 10 else Category20[20]
    colour = {g: palette[i % len(palette)] for i, g in enumerate(groups)}
    items, by_group, hover_points, hover_roofs = [], {}, [], []
    for side, (label, roofs, points) in sides.items():
        colours, dash, marker, filled = SIDES[side]
        mine = []
        for i, r in enumerate(roofs):
            xs, ys, names = [], [], []
            top = max((v for _, v in r.compute), default=None)
            slowest = min((bw for _, bw in r.memory), default=None)
            for name, bw in r.memory:
                x0, x1 = max(x_lo, y_lo / bw), min(x_hi, top / bw) if top else x_hi
                xs.append([x0, x1]), ys.append([bw * x0, bw * x1])
                names.append(f"{side}: {r.name}: {name} {qty(bw, 'B/s')}")
            for name, p in r.compute:
                x0 = max(x_lo, p / slowest) if slowest else x_lo
                xs.append([x0, x_hi]), ys.append([p, p])
                names.append(f"{side}: {r.name}: {name} {qty(p, 'FLOP/s')}")
            if xs:
                line = fig.multi_line("xs", "ys", source=ColumnDataSource(
                    {"xs": xs, "ys": ys, "label": names}), line_color=colours[i % len(colours)],
                    line_dash=dash, line_width=2, hover_line_width=4)
                mine.append(line), hover_roofs.append(line)
            placed = _labels(side, [r], (x_lo, x_hi), y_lo)
            if placed:
                tx, ty, tt, align = map(list, zip(*placed))
                mine.append(fig.text("x", "y", "text", source=ColumnDataSource(
                    {"x": tx, "y": ty, "text": tt, "align": align}), text_align="align",
                    text_baseline="bottom" if side == "A" else "top", text_font_size="11px",
                    text_color=colours[i % len(colours)]))
        for group in groups:
            pts = [p for p in points if p.group == group and p.intensity > 0
                   and p.flop_per_s > 0]
            if not pts:
                continue
            r = fig.scatter("x", "y", source=ColumnDataSource({
                "x": [p.intensity for p in pts], "y": [p.flop_per_s for p in pts],
                "text": [f"{side}: {p.text}" for p in pts]}), marker=marker, size=10,
                line_color=colour[group], fill_color=colour[group] if filled else None,
                fill_alpha=0.7, line_width=2)
            mine.append(r), hover_points.append(r)
            by_group.setdefault(group, []).append(r)
        key = fig.scatter([], [], marker=marker, size=10, line_color=colours[0],
                          fill_color=colours[0] if filled else None, line_width=2)
        items.append(LegendItem(label=f"{side}: {label}", renderers=[key, *mine]))
    items += [LegendItem(label=g, renderers=rs) for g, rs in by_group.items()]
    if hover_points:
        fig.add_tools(HoverTool(renderers=hover_points, tooltips=[("", "@text")]))
    if hover_roofs:
        fig.add_tools(HoverTool(renderers=hover_roofs, tooltips=[("", "@label")],
                                line_policy="nearest"))
    ncols = 1 if len(items) <= 4 else 2
    fig.add_layout(Legend(items=items, click_policy="hide", ncols=ncols,
                          label_text_font_size="12px", spacing=0, padding=4), "below")
    fig.height = height + 20 * math.ceil(len(items) / ncols) + 12
    return fig
