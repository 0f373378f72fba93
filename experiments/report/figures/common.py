"""What every figure shares: the style, the tick and legend helpers, the colours, and the
`@figure` decorator that selects a figure's rows and lays out its grid.

A figure is a function of a `Grid` in the module of its name, declared once in catalog.FIGURES
(category, caption, experiments; an undeclared module fails at decoration). In bandwidth.py:

    @figure(where=lambda r: r[r.byte_per_s > 0], missing="no bandwidth rows")
    def bandwidth(g: Grid):
        for ax, system, rows in g:  # each system: its panels, its rows
            ...

The decorator keeps the ok rows of the figure's catalog experiments, narrows them with
`where`, raises Missing (the figure becomes a placeholder naming what is missing) when no system
has any, and stacks the systems, one subfigure of `panels` axes each (at most two side by side,
so the text stays readable on a narrow screen). The registered function takes Inputs and returns
the Figure.
"""

from __future__ import annotations

import functools
import io
import math
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib import font_manager  # noqa: E402
from matplotlib.layout_engine import ConstrainedLayoutEngine  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from matplotlib.text import Text  # noqa: E402
from matplotlib.ticker import (FixedLocator, Formatter, FuncFormatter, LogLocator,  # noqa: E402
                               NullFormatter, NullLocator)

from experiments.report.catalog import FIGURES  # noqa: E402
from experiments.analysis.dataset import Dataset, ok  # noqa: E402
from experiments.analysis.units import binary, num  # noqa: E402

DPI = 150  # the figures are laid out at this resolution (they are written as SVG)
MAX_COLUMNS = 2  # panels side by side: more would shrink the text below ~10 px at 800 px wide
DTYPE_ORDER = ["float64", "float32", "tf32", "float16", "bfloat16", "float8_e4m3"]
NOTE = 10  # points: annotations, the smallest text of a figure


class Missing(Exception):
    """No data for this figure; the message says which experiment is missing."""


@dataclass
class Inputs:
    ds: Dataset
    ceilings: pd.DataFrame
    sheets: list
    per_row: pd.DataFrame  # decode prediction per row
    knees: pd.DataFrame


# --- text: sizes, and CJK only where a font can draw it ----------------------------------------

CJK = re.compile("[\u2e80-\u2fdf\u3000-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
                 "\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]+")
_CJK_FAMILY = re.compile(r"CJK|Source Han|WenQuanYi|Droid Sans Fallback|YaHei|SimHei|PingFang|"
                         r"Hiragino|Noto Sans (SC|TC|HK|JP|KR)\b")
_CJK_FILE = re.compile(r"(?i)cjk|sourcehan|wqy|droidsansfallback|msyh|simhei|pingfang")


def _cjk_families() -> list[str]:
    """Known CJK families, best first: sans, proportional, simplified Chinese (the article's)."""
    names = {f.name for f in font_manager.fontManager.ttflist if _CJK_FAMILY.search(f.name)}
    return sorted(names, key=lambda n: ("Serif" in n, "Mono" in n, "SC" not in n, n))


@functools.cache
def cjk_font() -> str | None:
    """A font family that draws Chinese, or None. The font cache may predate a font installed
    later, so the system's font files are looked at too (a directory listing; a few ms each)."""
    if not _cjk_families():
        for path in font_manager.findSystemFonts():
            if _CJK_FILE.search(Path(path).name) and "Serif" not in path:
                try:
                    font_manager.fontManager.addfont(path)
                except (OSError, RuntimeError, ValueError):
                    continue
    return next(iter(_cjk_families()), None)


def literal(text) -> str:
    """`text` as matplotlib draws it as written: each `$` escaped, so a device's, host's or
    user's text never starts mathtext (between two `$`, `_` `^` `\\` turn to math, and math it
    cannot parse raises: no figure). Every label, title, legend entry and note of such text."""
    return str(text).replace("$", r"\$")


def no_cjk(text):
    return CJK.sub("[CJK]", text) if isinstance(text, str) else text


class _NoCJK(Formatter):
    """Another formatter's tick labels without CJK (tick labels are made anew at every draw)."""

    def __init__(self, inner):
        self.inner = inner

    def set_axis(self, axis):
        self.axis = axis
        self.inner.set_axis(axis)

    def __call__(self, x, pos=None):
        return no_cjk(self.inner(x, pos))

    def format_ticks(self, values):
        return [no_cjk(s) for s in self.inner.format_ticks(values)]

    def get_offset(self):
        return no_cjk(self.inner.get_offset())


def drop_cjk(fig):
    """Without a CJK font matplotlib draws CJK as empty boxes: say [CJK] instead."""
    for t in fig.findobj(Text):
        if CJK.search(t.get_text()):
            t.set_text(no_cjk(t.get_text()))
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(_NoCJK(axis.get_major_formatter()))
            axis.set_minor_formatter(_NoCJK(axis.get_minor_formatter()))


def style():
    sns.set_theme(style="whitegrid", context="notebook")
    cjk = cjk_font()
    plt.rcParams.update({
        "svg.fonttype": "none", "svg.hashsalt": "rooflab", "figure.dpi": DPI,
        "font.size": 11, "axes.titlesize": 11.5, "axes.labelsize": 11.5,
        "xtick.labelsize": 10.5, "ytick.labelsize": 10.5, "legend.fontsize": 10.5,
        "legend.title_fontsize": 11, "figure.titlesize": 12,
        # the CJK font after the Latin one: matplotlib falls back to it glyph by glyph
        "font.family": ["sans-serif"] + ([cjk] if cjk else [])})


# --- axes ------------------------------------------------------------------------------------

def bytes_label(x, _=None) -> str:
    """A size on an axis or in a label: "1.5 MiB" (units.binary)."""
    return binary(x)


def _num(v, _=None) -> str:
    return num(v)


def log_ticks(axis, fmt=_num):
    """Label decades with `fmt`; label minor ticks too only when the axis spans < 2 decades
    (otherwise matplotlib's 2x10^2 style labels pile up). Minor ticks are made only where
    labelled: the grid has none, and each costs time at every draw."""
    lo, hi = sorted(axis.get_view_interval())
    axis.set_major_formatter(FuncFormatter(fmt))
    decades = math.log10(hi / lo) if lo > 0 else 99
    keep = (2, 3, 5) if decades < 1 else (2, 5) if decades < 2 else ()
    if not keep:
        axis.set_minor_locator(NullLocator())
        return
    axis.set_minor_locator(LogLocator(subs=keep))
    axis.set_minor_formatter(FuncFormatter(fmt))


def ticks_at(axis, values, fmt=lambda v, _=None: f"{v:.0f}"):
    """Ticks exactly at the measured sizes (thinned to at most 8)."""
    values = sorted(set(float(v) for v in values))
    step = max(1, math.ceil(len(values) / 8))
    axis.set_major_locator(FixedLocator(values[::step]))
    axis.set_major_formatter(FuncFormatter(fmt))
    axis.set_minor_locator(NullLocator())
    axis.set_minor_formatter(NullFormatter())


def bytes_ticks(axis, base: int):
    """Byte sizes (KiB, MiB ...) at every `base`-fold step, no minor ticks."""
    axis.set_major_locator(LogLocator(base=base))
    axis.set_major_formatter(FuncFormatter(bytes_label))
    axis.set_minor_locator(NullLocator())


def root(artist):
    """The figure that is saved (an artist may sit in a subfigure)."""
    try:
        return artist.get_figure(root=True)
    except TypeError:  # matplotlib < 3.10: a subfigure's .figure is the root
        return artist.figure.figure


def title(ax, text: str):
    """A panel's title, wrapped to the panel's width."""
    fig = root(ax)
    width = ax.get_position().width * fig.get_figwidth() * 72  # points
    # escaped after wrapping: a line broken inside a long word must not split a `\$`
    ax.set_title(literal(textwrap.fill(text, max(20, int(
        width / (0.55 * plt.rcParams["axes.titlesize"]))))), loc="left")


def ceiling_rows(inp: Inputs, system: str) -> pd.DataFrame:
    c = inp.ceilings
    return c[(c.system == system) & c.value.notna()]


# One colour per dtype in every figure (seaborn's colorblind palette)
_CB = sns.color_palette("colorblind", 10)
DTYPE_COLORS = {"float32": _CB[0], "tf32": _CB[2], "float16": _CB[1], "bfloat16": _CB[4],
                "float8_e4m3": _CB[3], "float64": _CB[7]}  # fp16 and bf16 far apart


def palette(values) -> dict:
    """Colours for hue values: the fixed dtype colours, then the rest of the palette in order."""
    values = sorted(set(values), key=lambda v: (DTYPE_ORDER.index(v) if v in DTYPE_ORDER
                                                else len(DTYPE_ORDER), str(v)))
    if not all(v in DTYPE_COLORS for v in values):  # ops, curves...: the palette in order
        return dict(zip(values, sns.color_palette("colorblind", max(len(values), 1))))
    return {v: DTYPE_COLORS[v] for v in values}


def legend_right(ax, source=None, **kw):
    """The legend of `source` (default: ax itself) right of ax, outside the axes."""
    source = source or ax
    handles, labels = source.get_legend_handles_labels()
    if source.get_legend():
        source.get_legend().remove()
    if handles:
        ax.legend(handles, [literal(t) for t in labels], loc="upper left",
                  bbox_to_anchor=(1.01, 1.0), frameon=False, **kw)


def legend_inside(ax, **kw):
    """The legend where it hides the fewest points: two panels side by side leave no room."""
    handles, labels = ax.get_legend_handles_labels()
    if ax.get_legend():
        ax.get_legend().remove()
    if handles:
        ax.legend(handles, [literal(t) for t in labels], loc="best", framealpha=0.85, **kw)


def legend_below(ax, groups_titles=("dtype", "experiment")):
    """One legend under the axes, one column per seaborn group (hue, style), titles in bold."""
    handles, labels = ax.get_legend_handles_labels()
    if ax.get_legend():
        ax.get_legend().remove()
    groups = []
    for h, label in zip(handles, labels):
        if label in groups_titles:  # seaborn's group titles
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
    for name, items in groups:  # legends fill column by column: pad each group to `rows`
        titles.append(len(entries))
        entries += [(blank, name)] + items + [(blank, "")] * (rows - 1 - len(items))
    handles, labels = zip(*entries)
    leg = ax.legend(handles, [literal(t) for t in labels], ncol=len(groups), loc="upper center",
                    bbox_to_anchor=(0.5, -0.14), frameon=False, handletextpad=0.4,
                    columnspacing=2.0)
    for i in titles:
        leg.get_texts()[i].set_weight("bold")


TIP = "rooflab-tip:"  # marks our per-point links, which save() turns into SVG <title>s


def tooltips(collection, labels: list[str]):
    """Name each point of a scatter on hover. Matplotlib writes a collection's per-point urls as
    <a> around each point's element (whichever way it draws them); save() makes each a <g> with
    a <title>, which browsers show on hover."""
    collection.set_urls([TIP + label for label in labels])


def _with_tooltips(svg: str) -> str:
    return re.sub(rf'<a xlink:href="{TIP}([^"]*)"[^>]*>(.*?)</a>', r"<g><title>\1</title>\2</g>",
                  svg, flags=re.S)


# --- the decorator and its grid ----------------------------------------------------------------

DRAW: dict = {}  # name -> function(Inputs) -> Figure, filled by @figure


@dataclass
class Grid:
    """The panels of each system; iterating gives (axes, system, that system's rows)."""
    fig: plt.Figure
    axes: list  # per system: its panels (one Axes, or a tuple)
    inp: Inputs
    rows: pd.DataFrame  # the figure's rows, every system
    all_rows: pd.DataFrame  # ok rows of the figure's experiments, before `where`
    systems: list[str]

    def __iter__(self):
        for axes, system in zip(self.axes, self.systems):
            yield axes, system, self.rows[self.rows.system == system]


def _layout(systems: list[str], panels: int, panel, columns: int):
    """A subfigure per system (its name as the title) holding its panels, `columns` per row."""
    ncols = min(panels, columns)
    nrows = math.ceil(panels / ncols)
    fig = plt.figure(figsize=(panel[0] * ncols, panel[1] * nrows * len(systems)),
                     layout="constrained")
    # a wider margin than matplotlib's 3 pt: a browser's font, a little larger than the one
    # measured, must not put the y label's first letter past the SVG's edge
    fig.get_layout_engine().set(w_pad=6 / 72, h_pad=4 / 72)
    subs = fig.subfigures(len(systems), 1, squeeze=False)[:, 0]
    axes = []
    for sub, system in zip(subs, systems):
        sub.suptitle(literal(system), x=0.01, ha="left", weight="bold", fontsize=12)
        a = sub.subplots(nrows, ncols, squeeze=False).ravel()
        for extra in a[panels:]:
            extra.remove()
        axes.append(a[0] if panels == 1 else tuple(a[:panels]))
    return fig, axes


def figure(*, where=None, missing: str | None = None, panels: int = 1,
           panel=(7.5, 5.0), columns: int = MAX_COLUMNS):
    """Register a figure drawn by `draw(grid)`, named by its module; `where(rows)` narrows (or
    extends) the ok rows of the catalog's experiments and may raise Missing with a better reason;
    each system gets `panels` axes of `panel` inches, `columns` side by side."""

    def register(draw):
        name = draw.__module__.rpartition(".")[2]
        if name not in FIGURES or name in DRAW:  # the catalog is the figures' one declaration
            raise ValueError(f"@figure in {draw.__module__}: {name!r} " + (
                f"already drawn by {DRAW[name].__module__}" if name in DRAW else
                f"is not declared in experiments/report/catalog.py ({', '.join(FIGURES)})"))
        experiments = FIGURES[name].experiments
        why = missing or f"no ok {' or '.join(experiments)} rows"

        @functools.wraps(draw)
        def make(inp: Inputs):
            all_rows = ok(inp.ds.rows)
            all_rows = all_rows[all_rows.experiment.isin(experiments)]
            rows = where(all_rows) if where is not None else all_rows
            drawn = [s for s in inp.ds.systems().system if (rows.system == s).any()]
            systems = inp.ds.own_first(drawn)  # published sets: their reports, the tables
            if not systems:
                raise Missing(why)
            fig, axes = _layout(systems, panels, panel, columns)
            absent = [s for s in inp.ds.own_first(list(inp.ds.systems().system)) if s not in drawn]
            notes = "; ".join([f"not drawn for {', '.join(absent)}: {why}"] * bool(absent) + [
                "the published sets: in their own reports"] * (len(drawn) > len(systems)))
            if notes:
                note = literal(textwrap.fill(notes, int(fig.get_figwidth() * 72 / (0.55 * NOTE))))
                fig.supxlabel(note, fontsize=NOTE, color="0.35", ha="left", x=0.01)
            draw(Grid(fig, axes, inp, rows, all_rows, systems))
            return fig
        DRAW[name] = make
        return make
    return register


# --- files -----------------------------------------------------------------------------------

def placeholder(name: str, reason: str):
    fig = plt.figure(figsize=(7.5, 1.4), layout="constrained")
    fig.text(0.5, 0.62, literal(f"{name}: not drawn"), ha="center", fontsize=13, weight="bold")
    fig.text(0.5, 0.3, literal(reason), ha="center", fontsize=11, wrap=True)
    return fig


def freeze_layout(fig):
    """Lay the figure out once and keep it: every later draw (the SVG, the PNG) skips the
    constrained-layout pass, which costs as much as drawing."""
    if not isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine):
        return
    if cjk_font() is None:  # before the layout measures the text
        drop_cjk(fig)
    fig.draw_without_rendering()
    fig.set_layout_engine("none")


def save(fig, outdir: Path, name: str):
    """<name>.svg: the HTML report inlines it (points named on hover), Snakemake's report shows
    it. Constrained layout keeps everything inside the figure, so no bbox_inches="tight" (it would
    draw the file twice)."""
    freeze_layout(fig)
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    (outdir / f"{name}.svg").write_text(_with_tooltips(buf.getvalue()), encoding="utf-8")

