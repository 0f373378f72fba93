"""What a claim is, how it is registered, and the four verdicts it can get.

A claim is registered once, in the module of its article section, with its sentence in the
article's Chinese and in English, the prediction, what would make it fail, its figure and the
experiments whose rows it reads. Its check gets one `System` (one host/device's rows, the fitted
ceilings, the decode knees, its datasheet) and returns a `Result`, or raises `NotMeasurable` with
the reason. A check judges its rows against something measured apart from them (other ops, other
experiments, the datasheet), never against a ceiling fitted from the same points, with tolerances
that are constants of its module, fixed before any data is seen.

The article's own arithmetic (0.125 FLOP/B, 2 x 4096^3, 936 GB/s x 0.125, 35.6 / 0.936) is a
`worked example`: recomputed from config/datasheets.yaml, shown apart, never counted as a
measured "holds".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from experiments.analysis import datasheets, roofline
from experiments.analysis.dataset import ok
from experiments.analysis.units import WORDS, qty, words

HOLDS, FAILS, UNDECIDED, NOT_MEASURABLE, WORKED = (
    "holds", "does not hold", "undecided", "not measurable here", "worked example")
VERDICTS = (HOLDS, FAILS, UNDECIDED, NOT_MEASURABLE, WORKED)
MEASURED = "measured"  # the `kind` of a verdict on a system's rows
ARTICLE = "the article's arithmetic (datasheets)"  # the `system` of worked examples
ANALYSIS_ERROR = "the check could not read these rows"
PHYSICAL = 1.05  # a fitted ceiling above this x the device's datasheet peak is not a reading


class NotMeasurable(Exception):
    """The claim cannot be checked on this system; `measurement` may still show numbers."""

    def __init__(self, reason: str, measurement: str = ""):
        super().__init__(reason)
        self.measurement = measurement


@dataclass
class Result:
    """A measured verdict: the metric judged, its value, the threshold, and the rows behind it."""

    holds: bool
    measurement: str  # the numbers, in words
    metric: str  # what `value` is
    value: float
    threshold: str  # the condition `value` had to meet, as stated before the data
    used: str  # which rows and ceilings the check read
    rows_used: int
    # The condition nearest to flipping the verdict: how far its metric sits from its threshold
    # (signed, + on the side the verdict took) and the run-to-run noise of that metric, both
    # relative; within its noise the verdict is undecided (NaN: not judged for noise).
    margin: float = math.nan
    noise: float = math.nan
    what: str = ""  # which condition that is

    @property
    def undecided(self) -> bool:
        return abs(self.margin) <= self.noise  # False where either is NaN


def nearest(*conditions: tuple[float, float, str]) -> tuple[float, float, str]:
    """Of the (margin, noise, what) of the conditions an all-of verdict needs (margins signed
    + where the condition holds), the one that decides it: a failing one beyond its noise if
    any (the verdict fails whatever the others do), else the nearest to flipping, in units of
    its noise."""
    scored = [c for c in conditions if math.isfinite(c[0])]
    if not scored:
        return math.nan, math.nan, ""

    def z(c):
        return c[0] / c[1] if c[1] > 0 else math.copysign(math.inf, c[0])

    return min(scored, key=z)


def half_width(row) -> float:
    """Half a ceiling's interval (a row or a dict) as a share of its value: the +- that a
    repeat run's value falls in, its run-to-run noise."""
    if row is None or not row["value"] > 0:
        return math.nan
    return float((row["ci_high"] - row["ci_low"]) / 2 / row["value"])


@dataclass(frozen=True)
class Section:
    anchor: str
    title: str
    figure: str | None


Text = str | Callable[[], str]  # a text, or a function building it from the module's limits


def _text(t: Text) -> str:
    return t() if callable(t) else t


@dataclass
class Claim:
    """`prediction` and `fails_if` are built when read, from the same module constants (`limits`,
    their names) that the check judges with: change a limit and both the texts and the verdicts
    follow it (tests/unit/analysis/claims/test_analysis_claims.py changes each one to make
    sure)."""

    id: str
    section: Section
    en: str
    zh: str  # the article's sentence
    prediction_text: Text
    fails_if_text: Text  # in words: what would have made it fail
    figure: str | None
    experiments: tuple[str, ...]
    check: Callable[[System], Result] | None = None
    limits: tuple[str, ...] = ()  # names of the check module's constants it judges with

    @property
    def prediction(self) -> str:
        return _text(self.prediction_text)

    @property
    def fails_if(self) -> str:
        return _text(self.fails_if_text)


@dataclass
class WorkedExample:
    id: str
    what: str | Callable[[list], str]  # a label, or sheets -> the label (it reads the datasheet)
    article: str  # what the article says
    compute: Callable[[list], tuple[float, str]]  # sheets -> (value, shown)
    expected: float  # the article's number: the recomputed value must round to it
    rel_tol: float


CLAIMS: dict[str, Claim] = {}
WORKED_EXAMPLES: dict[str, list[WorkedExample]] = {}
SECTIONS: list[Section] = []


def section(anchor: str, title: str, figure: str | None) -> Section:
    s = Section(anchor, title, figure)
    SECTIONS.append(s)
    return s


def claim(cid: str, sec: Section, *, en: str, zh: str, prediction: Text, fails_if: Text,
          experiments: tuple[str, ...], figure: str | None = None, limits: tuple[str, ...] = ()):
    """Register a measured claim; the decorated function is its check. `limits` names the
    module constants the check compares with; `prediction` and `fails_if` are functions that
    read them when the text is wanted."""
    def register(fn):
        if cid in CLAIMS:
            raise ValueError(f"claim {cid} registered twice")
        CLAIMS[cid] = Claim(cid, sec, en, zh, prediction, fails_if,
                            figure if figure is not None else sec.figure, experiments, fn,
                            limits)
        return fn
    return register


def text_only(cid: str, sec: Section, *, en: str, zh: str, prediction: str,
              experiments: tuple[str, ...] = (), figure: str | None = None):
    """Register a claim that only the article's arithmetic supports (its worked examples)."""
    CLAIMS[cid] = Claim(cid, sec, en, zh, prediction, "", figure if figure is not None else
                        sec.figure, experiments, None)


def worked_example(cid: str, what, article: str, expected: float, rel_tol: float = 0.02):
    """Register the article's arithmetic for a claim: fn(sheets) -> (value, shown)."""
    def register(fn):
        WORKED_EXAMPLES.setdefault(cid, []).append(
            WorkedExample(cid, what, article, fn, expected, rel_tol))
        return fn
    return register


def article_sheet(sheets) -> datasheets.Datasheet:
    ref = datasheets.by_name(sheets, datasheets.ARTICLE_DEVICE)
    if ref is None:
        raise NotMeasurable(f"no {datasheets.ARTICLE_DEVICE} entry in the datasheets")
    return ref


@dataclass
class System:
    name: str
    kind: str  # cpu | cuda
    device_name: str
    rows: pd.DataFrame  # every row of this system (all statuses)
    ceilings: pd.DataFrame
    facts: dict
    sheet: datasheets.Datasheet | None
    sheets: list = field(default_factory=list)
    knees: pd.DataFrame = field(default_factory=pd.DataFrame)

    def __post_init__(self):
        # every check filters by experiment, several times each: split the rows once
        self._by_experiment = ({e: g for e, g in self.rows.groupby("experiment", sort=False)}
                               if "experiment" in self.rows else {})

    def experiment_rows(self, name: str) -> pd.DataFrame:
        """Every row (all statuses) of one experiment on this system."""
        return self._by_experiment.get(name, self.rows.iloc[:0])

    def exp(self, name: str, op: str | None = None) -> pd.DataFrame:
        """ok rows of an experiment (and op); NotMeasurable says why there are none."""
        rows = self.experiment_rows(name)
        if op is not None:
            rows = rows[rows.op.str.contains(op)]
        what = f"{name} rows" + (f" with op {op}" if op else "")
        if rows.empty:
            raise NotMeasurable(f"no {what}")
        good = ok(rows)
        if good.empty:
            counts = ", ".join(f"{n} {st}" for st, n in rows.status.value_counts().items())
            msg = next((m for m in rows.message.dropna() if m), "")
            raise NotMeasurable(f"no ok {what} ({counts})" + (f": {msg}" if msg else ""))
        return good

    def ceiling_row(self, name: str, dtype=None) -> pd.Series | None:
        row = roofline.lookup(self.ceilings, self.name, name, dtype)
        if row is not None:
            self._physical(name, dtype, float(row.value))
        return row

    def ceiling(self, name: str, dtype=None) -> float | None:
        v = roofline.value(self.ceilings, self.name, name, dtype)
        if v:
            self._physical(name, dtype, v)
        return v

    def _physical(self, name: str, dtype, value: float):
        """NotMeasurable when a fitted ceiling exceeds this device's datasheet peak by more
        than PHYSICAL: noise, not the device (C8 reads the raw table: there it fails)."""
        if self.sheet is None:
            return
        unit = {"dram_bw": None, "matrix_flops": "matrix", "vector_flops": "vector"}
        if name not in unit:
            return
        peak = self.sheet.bandwidth_Bps if unit[name] is None else \
            self.sheet.peak(unit[name], dtype)
        if peak and value > PHYSICAL * peak:
            u = "FLOP/s" if unit[name] else "B/s"
            raise NotMeasurable(f"the fitted {roofline.label(name)}{' ' + dtype if dtype else ''}"
                                f" ({qty(value, u)}) exceeds the {self.sheet.name} datasheet's "
                                f"{qty(peak, u)} by more than {PHYSICAL - 1:.0%}: not a physical "
                                "reading")

    def need_ceiling(self, name: str, dtype=None) -> pd.Series:
        """The fitted ceiling's row (value, ci_low, ci_high ...), or NotMeasurable with its note."""
        row = self.ceiling_row(name, dtype)
        if row is None:
            c = self.ceilings[(self.ceilings.system == self.name)
                              & (self.ceilings.ceiling == name)]
            if dtype is not None:
                c = c[c.dtype == dtype]
            note = c.note.dropna().iloc[0] if not c.empty and c.note.notna().any() else ""
            raise NotMeasurable(f"no {roofline.label(name)}{' ' + dtype if dtype else ''} fitted"
                                + (f" ({note})" if note else ""))
        return row

    def need_gpu(self, what: str):
        if self.kind != "cuda":
            raise NotMeasurable(f"{what}; this system is a CPU ({self.device_name})")


def interval(row: pd.Series) -> tuple[float, float]:
    """(low, high) of a ceiling's 95 % interval; the value itself when it has none."""
    lo, hi = row.get("ci_low"), row.get("ci_high")
    v = float(row.value)
    return (float(lo) if pd.notna(lo) else v, float(hi) if pd.notna(hi) else v)


def counts(rows: pd.DataFrame, key: str = "op") -> str:
    """'bandwidth: copy, scale (24 rows)'."""
    if rows.empty:
        return "no rows"
    exps = ", ".join(sorted(rows.experiment.unique()))
    # the names units.WORDS knows as words (timers); kernels keep the names the tables use
    keys = ", ".join(sorted(words(k) if k in WORDS else k
                            for k in map(str, rows[key].dropna().unique())))
    return f"{exps}: {keys} ({len(rows)} rows)"


__all__ = ["HOLDS", "FAILS", "NOT_MEASURABLE", "WORKED", "MEASURED", "ARTICLE", "VERDICTS",
           "NotMeasurable", "Result", "Section", "Claim", "WorkedExample", "System",
           "claim", "text_only", "worked_example", "section", "article_sheet", "interval",
           "counts", "CLAIMS", "WORKED_EXAMPLES", "SECTIONS", "ANALYSIS_ERROR", "PHYSICAL"]
