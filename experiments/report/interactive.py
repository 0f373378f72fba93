"""The interactive roofline: Bokeh, its script inlined once per page, so the report stays one
offline file (no fetch at view time). Zoom and pan, hover for a point's identity and numbers,
click a legend entry to hide a system's roofs, a workload or a kind of point.

Why Bokeh: it inlines only what a page uses (its core, 1.3 MB; Plotly's one bundle is ~4.6 MB),
it is kept by NumFOCUS and installs from wheels on Python 3.11-3.13, and its legend hides what a
reader clicks without widgets or a server. The seaborn figures stay as the publication figures.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from experiments.analysis.units import qty

# whole calls, their aten ops at counted intensity, and the ops at FLOPs / bytes ncu measured at
# each memory level (the hierarchical roofline): the kind is the marker's fill and size, as the
# marker itself names the system
KINDS = {"whole call": ("", 10, True), "aten op": ("", 8, False),
         "op at DRAM bytes (ncu)": ("_dot", 10, False), "op at L2 bytes (ncu)": ("_dot", 8, False),
         "op at L1 bytes (ncu)": ("_dot", 6, False)}
HIDDEN_AT_START = {"op at L2 bytes (ncu)", "op at L1 bytes (ncu)"}  # a click away
# one marker and one colour family per system (each marker has a "_dot" form for ncu's points);
# a family's darkest shade draws the roofs, the others its workloads
MARKERS = ("circle", "square", "diamond", "triangle", "hex", "star")
FAMILIES = (("#08306b", "#2171b5", "#4292c6", "#08519c", "#6baed6"),
            ("#7f2704", "#d94801", "#f16913", "#a63603", "#fd8d3c"),
            ("#00441b", "#238b45", "#41ab5d", "#006d2c", "#74c476"),
            ("#3f007d", "#6a51a3", "#807dba", "#54278f", "#9e9ac8"),
            ("#67000d", "#cb181d", "#ef3b2c", "#a50f15", "#fb6a4a"),
            ("#000000", "#525252", "#737373", "#252525", "#969696"))
DASHES = ("solid", "dashed", "dotdash", "dotted")
# hover text wraps in a box a narrow window holds (Bokeh escapes the field's value)
TOOLTIP = ('<div class="rl-tip" style="max-width:min(360px, 70vw); white-space:normal; '
           'overflow-wrap:anywhere; font-size:12px">@text</div>')
SI_JS = """const u = UNIT; const p = [[1e15,'P'],[1e12,'T'],[1e9,'G'],[1e6,'M'],[1e3,'k'],[1,'']];
for (const [f, s] of p) {
  if (Math.abs(tick) >= f) return (+(tick / f).toPrecision(3)) + ' ' + s + u; }
return (+tick.toPrecision(3)) + ' ' + u;"""


@dataclass
class Roofs:
    """One system's roofline: memory levels (label, bytes/s) and compute roofs (label, FLOP/s)."""

    name: str
    memory: list[tuple[str, float]]
    compute: list[tuple[str, float]]
    reference: bool = False  # a published set: drawn hidden, a legend click away


@dataclass
class Point:
    group: str  # the legend entry and colour within its system: a workload and dtype
    kind: str  # a key of KINDS
    intensity: float
    flop_per_s: float
    text: str  # the hover text
    extra: dict = field(default_factory=dict)
    system: str = ""  # the machine: its marker and colour family
    reference: bool = False


@dataclass
class Entry:
    """One legend line: what it toggles (renderer names) and how it is drawn."""

    label: str
    names: list[str]
    color: str
    marker: str = ""  # "" for a roof's line
    dash: str = "solid"
    on: bool = True


@dataclass
class Group:
    """A system's legend entries (its roofs, then its workloads)."""

    system: str
    reference: bool
    entries: list[Entry]


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


# the report's Bokeh, packed: gzip's third of its 1.3 MB in base64, unpacked by the browser's
# DecompressionStream, then the plots' scripts run (they wait in scripts of a type none runs)
AFTER = "text/x-after-bokeh"
UNPACK_JS = """(function () {
  const packed = document.getElementById("bokeh-packed");
  const run = (code) => { const s = document.createElement("script"); s.text = code;
                          document.body.appendChild(s); };
  if (!packed || !window.DecompressionStream) {
    document.querySelectorAll(".plot").forEach((p) => { p.insertAdjacentHTML("afterbegin",
      "<p class=missing>This browser cannot unpack the interactive roofline (it needs " +
      "DecompressionStream); the static one is in the roofline section.</p>"); });
    return;
  }
  const bytes = Uint8Array.from(atob(packed.textContent.trim()), (c) => c.charCodeAt(0));
  new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip")))
    .text().then(function (js) {
      run(js);
      document.querySelectorAll('script[type="AFTER"]').forEach((s) => run(s.textContent));
    });
})();""".replace("AFTER", AFTER)


def packed_script() -> str:
    """Bokeh's own script, gzipped and in base64, in a script element no browser runs (with
    UNPACK_JS at the page's end and `deferred` plots: 470 kB instead of 1.3 MB)."""
    import base64
    import gzip

    from bokeh.resources import Resources
    js = "\n".join(Resources(mode="inline", components=["bokeh"]).js_raw).encode()
    data = base64.b64encode(gzip.compress(js, mtime=0)).decode()
    return f'<script id="bokeh-packed" type="application/gzip">{data}</script>'


def deferred(plot_script: str) -> str:
    """A plot's script (Bokeh's components) made to wait for UNPACK_JS."""
    return re.sub(r"<script\b[^>]*>", f'<script type="{AFTER}">', plot_script)


def _range(systems, points):
    xs = [p.intensity for p in points if p.intensity > 0] + [0.05, 500.0]
    for s in systems:
        low_bw = min((bw for _, bw in s.memory), default=None)
        xs += [p / low_bw for _, p in s.compute] if low_bw else []
    ys = [p.flop_per_s for p in points if p.flop_per_s > 0]
    ys += [v for s in systems for _, v in s.compute]
    ys += [bw * min(xs) for s in systems for _, bw in s.memory]
    return (min(xs) / 2, max(xs) * 2), (min(ys) / 2 if ys else 1e9, max(ys) * 2 if ys else 1e15)


def build(systems: list[Roofs], points: list[Point], title: str = "", height: int = 560):
    """(the Bokeh figure, its legend as Groups) without a legend drawn: every system's roofs,
    every point; (None, []) when there is nothing to draw. A reference system starts hidden."""
    from bokeh.models import CustomJSTickFormatter, HoverTool
    from bokeh.plotting import figure as bk_figure

    points = [p for p in points if p.intensity > 0 and p.flop_per_s > 0]
    if not available() or not points and not any(s.memory or s.compute for s in systems):
        return None, []
    # the view opens on what is shown at start: this run's systems, without ncu's L2/L1 points
    start = [s for s in systems if not s.reference] or systems
    shown = [p for p in points if p.kind not in HIDDEN_AT_START and not p.reference] or points
    (x_lo, x_hi), (y_lo, y_hi) = _range(start, shown)
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
    names = list(dict.fromkeys([s.name for s in systems] + [p.system for p in points]))
    reference = {s.name for s in systems if s.reference} | {p.system for p in points
                                                            if p.reference}
    groups = {n: Group(n, n in reference, []) for n in names}
    roof_renderers, point_renderers, kinds = [], [], {}
    offsets = _offsets(systems, (y_lo, y_hi), height)
    for s in systems:
        i = names.index(s.name)
        color, dash = FAMILIES[i % len(FAMILIES)][0], DASHES[i % len(DASHES)]
        renderers = _roofs(fig, s, (x_lo, x_hi), (y_lo, y_hi), color, dash, i, offsets)
        for r in renderers:
            r.name, r.visible = f"rl{id(r)}", not s.reference
        if renderers:
            roof_renderers.append(renderers[0])
            groups[s.name].entries.append(Entry("roofs", [r.name for r in renderers], color,
                                                dash=dash, on=not s.reference))
    for system in names:
        i = names.index(system)
        marker, family = MARKERS[i % len(MARKERS)], FAMILIES[i % len(FAMILIES)][1:]
        mine = [p for p in points if p.system == system]
        order = list(dict.fromkeys(p.group for p in mine))
        # a reference set's workloads: one entry (their tooltips name each), one renderer per
        # kind of point, which keeps the page small; this run's: an entry per workload
        entries = [(f"workloads ({len(order)})", order)] if system in reference \
            else [(g, [g]) for g in order]
        for label, these_groups in entries if order else []:
            rs = []
            for kind, (suffix, size, filled) in KINDS.items():
                these = [p for p in mine if p.group in these_groups and p.kind == kind]
                if not these:
                    continue
                colors = [family[order.index(p.group) % len(family)] for p in these]
                c = colors[0] if len(set(colors)) == 1 else "c"  # a column only where needed
                r = fig.scatter("x", "y", source={"x": [p.intensity for p in these],
                                                  "y": [p.flop_per_s for p in these],
                                                  "text": [p.text for p in these],
                                                  **({"c": colors} if c == "c" else {})},
                                marker=marker + suffix, size=size, line_color=c,
                                fill_color=c if filled else None, fill_alpha=0.75,
                                line_width=1.5,
                                visible=kind not in HIDDEN_AT_START and system not in reference)
                r.name = f"rl{id(r)}"
                rs.append(r.name)
                kinds.setdefault(kind, []).append(r.name)
                point_renderers.append(r)
            groups[system].entries.append(Entry(
                label, rs, family[order.index(these_groups[0]) % len(family)], marker,
                on=system not in reference))
    if point_renderers:
        fig.add_tools(HoverTool(renderers=point_renderers, tooltips=TOOLTIP))
    if roof_renderers:
        fig.add_tools(HoverTool(renderers=roof_renderers, tooltips=TOOLTIP.replace(
            "@text", "@label"), line_policy="nearest"))
    legend = [g for g in groups.values() if g.entries]
    if len(kinds) > 1:  # a second way to toggle: by kind of point, its entry drawn in grey
        legend.append(Group("", False, [
            Entry(k, rs, "#777", MARKERS[0] + KINDS[k][0], on=k not in HIDDEN_AT_START)
            for k, rs in kinds.items()]))
    return fig, legend


def figure(systems: list[Roofs], points: list[Point], title: str = "", height: int = 560):
    """The Bokeh figure with its legend drawn below it (the compare page): every system's roofs,
    every point; None when there is nothing to draw."""
    from bokeh.models import Legend, LegendItem

    fig, groups = build(systems, points, title, height)
    if fig is None:
        return None
    by_name = {r.name: r for r in fig.renderers}
    items = []
    for g in groups:
        for e in g.entries:
            label = f"{g.system}: {e.label}" if g.system and (e.label == "roofs" or len(
                [x for x in groups if x.system]) > 1) else e.label
            items.append(LegendItem(label=label + (" (reference)" if g.reference else ""),
                                    renderers=[by_name[n] for n in e.names
                                               if by_name[n].visible or not e.on]))
    if groups and not groups[-1].system:  # the kinds: each entry's key drawn in grey
        for item, e in zip(items[-len(groups[-1].entries):], groups[-1].entries):
            item.renderers.append(fig.scatter([], [], marker=e.marker, size=9, line_color="#777",
                                              fill_color="#777" if e.marker == MARKERS[0]
                                              else None, visible=e.on))
    ncols = 1 if len(items) <= 4 else 2  # more would be cut off in a narrow window
    legend = Legend(items=items, click_policy="hide", ncols=ncols,
                    label_text_font_size="12px", spacing=0, padding=4)
    fig.add_layout(legend, "below")
    # the legend below takes its rows out of the figure's height: add them, so many workloads
    # (torch's modules, say) leave the plot its full height
    fig.height = height + 20 * math.ceil(len(items) / ncols) + 12
    return fig


LABEL_PX = 12  # a roof label's height at 11 px


def _offsets(systems: list[Roofs], yr, height: int) -> dict:
    """(system, roof) -> its compute label's offset down, in pixels: in screen pixels (the
    frame's height over the y range's decades) each label sits on its roof, or just below the
    one above it where that would overlap it, over every system shown at start together (and
    the reference sets' apart: they show when ticked)."""
    y_lo, y_hi = yr
    per_decade = (height - 110) / math.log10(y_hi / y_lo)
    out = {}
    for ref in (False, True):
        bottom = -math.inf  # the previous label's lowest pixel, down from the plot's top
        for name, label, p in sorted(((s.name, label, p) for s in systems
                                      if s.reference == ref for label, p in s.compute),
                                     key=lambda c: -c[2]):
            line = math.log10(y_hi / p) * per_decade
            out[name, label] = max(-2.0, bottom + LABEL_PX + 1 - line)
            bottom = line + out[name, label]
    return out


def _roofs(fig, s: Roofs, xr, yr, color, dash, nth: int = 0, offsets=None) -> list:
    """One system's memory slopes and compute roofs as one line set (hover names each), each
    labelled; returns the renderers (one legend entry hides them all). `nth`: the system's place,
    which moves its memory labels right, off another system's; `offsets`: _offsets'."""
    offsets = offsets or {}
    (x_lo, x_hi), (y_lo, _) = xr, yr
    top = max((v for _, v in s.compute), default=None)
    xs, ys, labels = [], [], []
    name = s.name + (" (reference)" if s.reference else "")
    for label, bw in s.memory:
        x_end = min(x_hi, top / bw) if top else x_hi
        x0 = max(x_lo, y_lo / bw)
        xs.append([x0, x_end]), ys.append([bw * x0, bw * x_end])
        labels.append(f"{name}: {label} {qty(bw, 'B/s')}")
    slowest = min((bw for _, bw in s.memory), default=None)
    for label, p in s.compute:
        x0 = max(x_lo, p / slowest) if slowest else x_lo
        xs.append([x0, x_hi]), ys.append([p, p])
        labels.append(f"{name}: {label} {qty(p, 'FLOP/s')}")
    if not xs:
        return []
    lines = fig.multi_line("xs", "ys", source={"xs": xs, "ys": ys, "label": labels},
                           line_color=color, line_dash=dash, line_width=2, hover_line_width=4)
    # every roof labelled: memory along its slope (DRAM lowest, each cache further right so
    # close parallel slopes keep their labels apart), compute at the right end; roofs within
    # 30 % of each other stack their labels downwards instead of printing over each other
    tx, ty, tt, align, base, dy = [], [], [], [], [], []
    span = math.log10(x_hi / x_lo)
    shift = 0.22 * nth
    for i, (label, bw) in enumerate(sorted(s.memory, key=lambda m: m[1])):
        x = max(x_lo * 10 ** (span * (0.06 + shift + 0.09 * i)), 1.5 * y_lo / bw)
        tx.append(x), ty.append(bw * x), tt.append(f"{label} {qty(bw, 'B/s')}")
        align.append("left"), base.append("bottom"), dy.append(-2)
    for label, p in s.compute:  # at the right edge, moved down where another's is (_offsets)
        tx.append(x_hi / 1.15), ty.append(p), tt.append(f"{label} {qty(p, 'FLOP/s')}")
        align.append("right"), base.append("bottom"), dy.append(offsets.get((s.name, label), -2))
    text = fig.text("x", "y", "text", source={"x": tx, "y": ty, "text": tt, "align": align,
                                              "base": base, "dy": dy},
                    text_align="align", text_baseline="base", y_offset="dy",
                    text_font_size="11px", text_color=color, level="annotation",
                    background_fill_color="white", background_fill_alpha=0.75)  # over points
    return [lines, text]


def embed(figures: dict) -> tuple[str, dict]:
    """(one script, name -> div) for the figures that exist: the page holds the script once."""
    figures = {k: f for k, f in figures.items() if f is not None}
    if not figures:
        return "", {}
    from bokeh.embed import components

    script, divs = components(figures)
    return script, divs
