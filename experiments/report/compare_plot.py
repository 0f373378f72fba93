"""`rooflab compare`'s overlaid roofline (Bokeh): a machine's roofs and points in one colour
family (interactive.FAMILIES; A's machine and its partner on B share it, the roofs in its darkest
shade, each workload a lighter one), a side its line dash and marker, every roof of both labelled
("A: DRAM 4.29 TB/s"), so a workload's two points read as one pair; a legend entry hides a side
or a workload, and every hover names its side and machine."""

from __future__ import annotations

import math

from experiments.analysis.units import qty
from experiments.report import interactive

# side -> (roof dash; point marker; filled); the colours are the machine's (FAMILIES)
SIDES = {"A": ("solid", "circle", True), "B": ("dashed", "square", False)}
FAMILIES = interactive.FAMILIES
KEY = "#555555"  # a side's legend key: its marker, in no machine's colour
# a label's box, for keeping labels apart: characters and line height in pixels, and the plot's
# width in pixels it is laid out for (narrower screens zoom; hover names every roof)
CHAR_PX, LINE_PX, WIDTH_PX = 6.5, 15, 800
SHARED, BOTH = 1.5, "#444444"  # A's and B's roof this close share one label, in grey


def _range(roofs, points):
    xs = [p.intensity for p in points] + [0.05, 500.0]
    for r in roofs:
        low = min((bw for _, bw in r.memory), default=None)
        xs += [p / low for _, p in r.compute] if low else []
    ys = [p.flop_per_s for p in points] + [v for r in roofs for _, v in r.compute]
    ys += [bw * min(xs) for r in roofs for _, bw in r.memory]
    # room above the highest roof for its label
    return (min(xs) / 2, max(xs) * 2), (min(ys) / 2 if ys else 1e9, max(ys) * 5 if ys else 1e15)


class Labels:
    """Roof labels placed where no other label is: each tries its candidate positions in turn
    (in log space: a box of its text's width and one line's height above its anchor)."""

    def __init__(self, x_range, y_range, height):
        self.x_lo, self.x_hi = (math.log10(v) for v in x_range)
        self.y_lo, self.y_hi = (math.log10(v) for v in y_range)
        self.per_x = (self.x_hi - self.x_lo) / WIDTH_PX
        self.per_y = (self.y_hi - self.y_lo) / (0.85 * height)  # less toolbar and axis
        self.boxes, self.out = [], []

    def _box(self, x, y, text, align):
        w = len(text) * CHAR_PX * self.per_x
        lx, ly = math.log10(x), math.log10(y)
        left = lx - w if align == "right" else lx
        return left, left + w, ly, ly + LINE_PX * self.per_y

    def _free(self, box):
        x0, x1, y0, y1 = box
        inside = x0 >= self.x_lo and x1 <= self.x_hi and y0 >= self.y_lo and y1 <= self.y_hi
        return inside and not any(x0 < b[1] and b[0] < x1 and y0 < b[3] and b[2] < y1
                                  for b in self.boxes)

    def add(self, candidates, text, align, colour):
        """Place `text` at the first free (x, y) of `candidates`, else at the first."""
        candidates = list(candidates)
        if not candidates:
            return
        x, y = next((c for c in candidates if self._free(self._box(*c, text, align))),
                    candidates[0])
        self.boxes.append(self._box(x, y, text, align))
        self.out.append((x, y, text, align, colour))


def _slots(sides: dict) -> dict[tuple[str, str], int]:
    """(side, machine) -> its colour family's index: the order its side names it in (roofs, then
    points), for a figure given none (compare.slots pairs A's machine with B's)."""
    out = {}
    for side, (_, roofs, points) in sides.items():
        names = dict.fromkeys([r.name for r in roofs] + [p.system for p in points])
        out |= {(side, n): i for i, n in enumerate(names)}
    return out


def _entries(sides: dict, slot: dict) -> list[dict]:
    """Every roof to label: side, kind (memory or compute), name, value, its system's colour and
    where its slope meets its top roof (memory) or its ridge (compute)."""
    out = []
    for side, (_, roofs, _) in sides.items():
        for r in roofs:
            colour = FAMILIES[slot.get((side, r.name), 0) % len(FAMILIES)][0]
            top = max((v for _, v in r.compute), default=None)
            slowest = min((bw for _, bw in r.memory), default=None)
            out += [{"side": side, "kind": "memory", "name": n, "value": bw, "unit": "B/s",
                     "end": top / bw if top else None, "colour": colour}
                    for n, bw in r.memory]
            out += [{"side": side, "kind": "compute", "name": n, "value": v, "unit": "FLOP/s",
                     "end": v / slowest if slowest else None, "colour": colour}
                    for n, v in r.compute]
    return out


def _merged(entries: list[dict]) -> list[dict]:
    """A's and B's same roof within SHARED of each other: one label naming both ("GEMM
    bfloat16: A 685, B 764 TFLOP/s"), drawn above the higher; the rest their own."""
    out, taken = [], set()
    for e in entries:
        if e["side"] != "A":
            continue
        twin = next((k for k, f in enumerate(entries) if f["side"] == "B" and k not in taken
                     and (f["kind"], f["name"]) == (e["kind"], e["name"])
                     and max(f["value"], e["value"]) <= SHARED * min(f["value"], e["value"])),
                    None)
        if twin is None:
            continue
        taken.add(twin)
        f = entries[twin]
        qa, qb = qty(e["value"], e["unit"]), qty(f["value"], f["unit"])
        unit = qb[qb.index(" "):]
        qa = qa.removesuffix(unit) if qa.endswith(unit) else qa
        high = e if e["value"] >= f["value"] else f
        out.append(high | {"side": "", "colour": BOTH,
                           "text": f"{e['name']}: A {qa}, B {qb}"})
        e["merged"] = True
    out += [e | {"text": f"{e['side']}: {e['name']} {qty(e['value'], e['unit'])}"}
            for k, e in enumerate(entries) if not e.get("merged") and k not in taken]
    return out


def _place(labels: Labels, e: dict):
    """A memory label along its slope from the left, a compute label along its roof from the
    right, then under it: at the first place no other label takes."""
    x_lo, x_hi, y_lo = 10 ** labels.x_lo, 10 ** labels.x_hi, 10 ** labels.y_lo
    v = e["value"]
    if e["kind"] == "memory":
        end = min(x_hi, e["end"]) if e["end"] else x_hi
        xs = [x_lo * 1.2 * 1.6 ** k for k in range(40)]
        labels.add([(x, v * x) for x in xs if x < end and v * x > y_lo * 1.5], e["text"],
                   "left", e["colour"])
        return
    ridge = e["end"] or x_lo
    xs = [x for x in (x_hi / 1.1 / 1.6 ** k for k in range(20)) if x > ridge * 1.2]
    line = 10 ** (LINE_PX * labels.per_y)
    # on the line, under it, then a line further above or below: close roofs stack their labels
    tiers = (0, -1, 1, -2, 2, -3, 3)
    labels.add([(x, v * line ** t) for t in tiers for x in xs] or [(x_hi / 1.1, v)],
               e["text"], "right", e["colour"])


def figure(sides: dict, height: int = 620, slot: dict | None = None):
    """sides: "A"/"B" -> (label, [Roofs], [Point]); slot: (side, machine) -> its colour family
    (_slots' order where not given); the Bokeh figure, or None with nothing to draw or no Bokeh."""
    if not interactive.available():
        return None
    from bokeh.models import (ColumnDataSource, CustomJSTickFormatter, HoverTool, Legend,
                              LegendItem)
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
    slot = _slots(sides) | (slot or {})

    def family(side, machine):
        return FAMILIES[slot.get((side, machine), 0) % len(FAMILIES)]

    def shade(side, p):  # a workload's shade, the same in its machine's family on both sides
        lighter = family(side, p.system)[1:]
        return lighter[groups.index(p.group) % len(lighter)]
    items, by_group, hover_points, hover_roofs = [], {}, [], []
    labels = Labels((x_lo, x_hi), (y_lo, y_hi), height)
    side_renderers: dict[str, list] = {}
    for side, (_, roofs, points) in sides.items():
        dash, marker, filled = SIDES[side]
        mine = []
        for r in roofs:
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
                    {"xs": xs, "ys": ys, "label": names}), line_color=family(side, r.name)[0],
                    line_dash=dash, line_width=2, hover_line_width=4)
                mine.append(line), hover_roofs.append(line)
        for group in groups:
            pts = [p for p in points if p.group == group and p.intensity > 0
                   and p.flop_per_s > 0]
            if not pts:
                continue
            r = fig.scatter("x", "y", source=ColumnDataSource({
                "x": [p.intensity for p in pts], "y": [p.flop_per_s for p in pts],
                "text": [f"{side}: {p.text}" for p in pts],
                "c": [shade(side, p) for p in pts]}), marker=marker, size=10,
                line_color="c", fill_color="c" if filled else None,
                fill_alpha=0.7, line_width=2)
            mine.append(r), hover_points.append(r)
            by_group.setdefault(group, []).append(r)
        key = fig.scatter([], [], marker=marker, size=10, line_color=KEY,
                          fill_color=KEY if filled else None, line_width=2)
        side_renderers[side] = [key, *mine]
    for e in sorted(_merged(_entries(sides, slot)), key=lambda e: (e["kind"], -e["value"])):
        start = len(labels.out)
        _place(labels, e)
        for x, y, text, align, c in labels.out[start:]:
            r = fig.text([x], [y], [text], text_align=align, text_baseline="bottom",
                         text_font_size="11px", text_color=c)
            side_renderers.get(e["side"], []).append(r)  # a shared label stays with both
    items += [LegendItem(label=f"{side}: {sides[side][0]}", renderers=rs)
              for side, rs in side_renderers.items()]
    items += [LegendItem(label=g, renderers=rs) for g, rs in by_group.items()]
    if hover_points:
        fig.add_tools(HoverTool(renderers=hover_points, tooltips=interactive.TOOLTIP))
    if hover_roofs:
        fig.add_tools(HoverTool(renderers=hover_roofs, line_policy="nearest",
                                tooltips=interactive.TOOLTIP.replace("@text", "@label")))
    ncols = 1 if len(items) <= 4 else 2
    fig.add_layout(Legend(items=items, click_policy="hide", ncols=ncols,
                          label_text_font_size="12px", spacing=0, padding=4), "below")
    fig.height = height + 20 * math.ceil(len(items) / ncols) + 12
    return fig
