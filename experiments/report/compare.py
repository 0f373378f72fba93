"""Two datasets side by side: their fitted ceilings with the ratio B / A, and every claim's
verdict on each, so the claims whose verdicts differ stand out.

A side is a merged dataset (results/measurements.parquet), a results folder holding one, or a
single measurement file. Its own systems are compared: the rows it measured, not the published
sets a sweep merges in (a file of published rows alone is its own). One system a side: they are
compared whatever their devices; several: paired by device (cpu with cpu, cuda:0 with cuda:0),
and a system with no partner is listed alone. The ceilings are fitted and the claims judged
afresh from the rows, by the workflow's steps (experiments/analysis/pipeline.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from pathlib import Path

import pandas as pd

from experiments.core.store import DatasetError
from experiments.analysis import claims, datasheets, dataset, pipeline, roofline
from experiments.analysis.units import si

KEY = ["ceiling", "dtype"]


@dataclass
class Side:
    """One dataset: where it came from, its rows, its ceilings and its claims table."""

    path: Path
    ds: dataset.Dataset
    ceilings: pd.DataFrame
    claims: pd.DataFrame

    def systems(self) -> pd.DataFrame:
        s = self.ds.systems()
        own = s[s.source == dataset.RUN]
        return (own if len(own) else s).reset_index(drop=True)


def measurements(path) -> Path:
    """The dataset file of `path`: the file itself, or a results folder's measurements.parquet."""
    path = Path(path)
    if path.is_dir():
        path = path / "measurements.parquet"
        if not path.is_file():
            raise DatasetError(f"{path} not found: a results folder holds it once `rooflab run` "
                               "has collected its measurements")
    elif not path.exists():
        raise DatasetError(f"{path}: no such file or folder")
    return path


def load(path, sheets: list) -> Side:
    """Read one side and fit it (raises DatasetError naming the file)."""
    file = measurements(path)
    ds = dataset.load(file)
    ceilings, _, table = pipeline.judged(ds, sheets)  # the workflow's steps, in memory
    return Side(file, ds, ceilings, table)


def pairs(a: Side, b: Side) -> list[tuple[str | None, str | None]]:
    """(system of A, system of B) to compare; None where a system has no partner."""
    sa, sb = a.systems(), b.systems()
    if len(sa) == 1 and len(sb) == 1:
        return [(sa.system[0], sb.system[0])]
    by_device = dict(zip(sb.device, sb.system))
    out = [(s.system, by_device.pop(s.device, None)) for s in sa.itertuples()]
    return out + [(None, s) for s in by_device.values()]


def _ceilings(side: Side, system: str | None) -> pd.DataFrame:
    c = side.ceilings
    c = c[c.system == system] if system is not None else c.iloc[0:0]
    return c[KEY + ["unit", "value"]].assign(dtype=c.dtype.fillna(""))


def ceilings_table(a: Side, b: Side) -> pd.DataFrame:
    """One row per system pair and ceiling: A's value, B's, and B / A (NaN where either is not
    fitted; the fit's notes say why)."""
    out = []
    for sys_a, sys_b in pairs(a, b):
        ca, cb = _ceilings(a, sys_a), _ceilings(b, sys_b)
        both = ca.merge(cb, on=KEY, how="outer", suffixes=("_a", "_b"))
        both = both[both.value_a.notna() | both.value_b.notna()]  # fitted on neither: left out
        # in the fit's order (caches, DRAM, GEMM, ...), each ceiling's dtypes together
        seen = pd.concat([ca, cb])
        rank = {col: {v: i for i, v in enumerate(dict.fromkeys(seen[col]))} for col in KEY}
        both = both.sort_values(KEY, key=lambda col: col.map(rank[col.name]))
        both["unit"] = both.unit_a.fillna(both.unit_b)
        out.append(both.assign(system_a=sys_a or "", system_b=sys_b or "", label=both.ceiling.map(
            roofline.label), ratio=both.value_b / both.value_a))
    cols = ["system_a", "system_b", "ceiling", "label", "dtype", "unit", "value_a", "value_b",
            "ratio"]
    return pd.concat(out, ignore_index=True)[cols] if out else pd.DataFrame(columns=cols)


def claims_table(a: Side, b: Side) -> pd.DataFrame:
    """Every measured claim per system pair: the verdict on each side and whether they differ."""
    def verdicts(side, system):
        t = side.claims[(side.claims.kind == claims.MEASURED) & (side.claims.system == system)]
        return t.set_index("claim")[["verdict", "measurement", "reason"]]

    out = []
    for sys_a, sys_b in pairs(a, b):
        both = verdicts(a, sys_a).merge(verdicts(b, sys_b), how="outer", left_index=True,
                                        right_index=True, suffixes=("_a", "_b"))
        both = both.reindex([c for c in claims.CLAIM_IDS if c in both.index])
        out.append(both.reset_index().assign(system_a=sys_a or "", system_b=sys_b or ""))
    cols = ["system_a", "system_b", "claim", "verdict_a", "verdict_b", "differ",
            "measurement_a", "measurement_b", "reason_a", "reason_b"]
    if not out:
        return pd.DataFrame(columns=cols)
    table = pd.concat(out, ignore_index=True)
    table["differ"] = table.verdict_a.fillna("") != table.verdict_b.fillna("")
    return table.fillna({"verdict_a": "", "verdict_b": ""})[cols]


def compare(path_a, path_b, datasheets_path) -> tuple[Side, Side, pd.DataFrame, pd.DataFrame]:
    sheets = datasheets.load(datasheets_path)
    a, b = load(path_a, sheets), load(path_b, sheets)
    return a, b, ceilings_table(a, b), claims_table(a, b)


def _ratio(r) -> str:
    return f"{r:.3g}x" if isinstance(r, float) and math.isfinite(r) else "n/a"


def shown(ceilings: pd.DataFrame) -> pd.DataFrame:
    """The ceilings table as a reader sees it: units, SI prefixes, the ratio as 0.5x."""
    return pd.DataFrame({
        "ceiling": ceilings.label, "dtype": ceilings.dtype,
        "A": [si(v, u) for v, u in zip(ceilings.value_a, ceilings.unit)],
        "B": [si(v, u) for v, u in zip(ceilings.value_b, ceilings.unit)],
        "B/A": ceilings.ratio.map(_ratio)})


def text(a: Side, b: Side, ceilings: pd.DataFrame, table: pd.DataFrame) -> str:
    """The comparison for a terminal: per system pair its ceilings, then the claims that differ."""
    lines = [f"A: {a.path}", f"B: {b.path}"]
    for (sys_a, sys_b), group in ceilings.groupby(["system_a", "system_b"], sort=False):
        lines += ["", f"{sys_a or '(none)'}  vs  {sys_b or '(none)'}"]
        lines += shown(group).to_string(index=False).splitlines() if len(group) else [
            "  no ceilings fitted"]
    differ = table[table["differ"]]
    lines.append("")
    if differ.empty:
        lines.append(f"Claims: all {table.claim.nunique()} measured claims have the same verdict "
                     "on both")
        return "\n".join(lines)
    lines.append("Claims that differ:")
    several = table[["system_a", "system_b"]].drop_duplicates().shape[0] > 1
    for (sys_a, sys_b), group in differ.groupby(["system_a", "system_b"], sort=False):
        if several:
            lines.append(f"  {sys_a or '(none)'}  vs  {sys_b or '(none)'}")
        lines += [f"  {r.claim:<4} A: {r.verdict_a or '-':<20} B: {r.verdict_b or '-'}"
                  for r in group.itertuples()]
    return "\n".join(lines)


def html(a: Side, b: Side, ceilings: pd.DataFrame, table: pd.DataFrame) -> str:
    """One self-contained page: the ceilings per system pair, then every claim's two verdicts."""
    parts = [f"<h1>rooflab: A against B</h1><p>A: {escape(str(a.path))}<br>"
             f"B: {escape(str(b.path))}</p>"]
    for (sys_a, sys_b), group in ceilings.groupby(["system_a", "system_b"], sort=False):
        parts.append(f"<h2>{escape(sys_a or '(none)')} vs {escape(sys_b or '(none)')}</h2>")
        parts.append(shown(group).to_html(index=False))
    parts.append("<h2>Claims (differing verdicts marked)</h2>")
    cols = {"system_a": "system A", "system_b": "system B", "claim": "claim",
            "verdict_a": "A", "verdict_b": "B", "differ": "differ"}
    parts.append(table[list(cols)].rename(columns=cols).to_html(index=False))
    style = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>rooflab compare</title>"
            f"<style>{style}</style></head><body>{''.join(parts)}</body></html>")


def write(out, a: Side, b: Side, ceilings: pd.DataFrame, table: pd.DataFrame) -> list[Path]:
    """`out`.html: one page. `out`.csv: the ceilings (raw numbers), and the claims beside it
    as <stem>.claims.csv. Returns the files written."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".html":
        out.write_text(html(a, b, ceilings, table))
        return [out]
    if out.suffix == ".csv":
        claims_csv = out.with_name(f"{out.stem}.claims.csv")
        ceilings.to_csv(out, index=False)
        table.to_csv(claims_csv, index=False)
        return [out, claims_csv]
    raise ValueError(f"--out {out}: give a .html or .csv file")
