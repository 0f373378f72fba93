"""Two datasets side by side: each ceiling on both with its interval, the ratio B / A with its
interval and a call (within noise, or differs), the claims whose verdicts differ grouped by why,
both rooflines overlaid and the machines' details side by side.

A side is a merged dataset (results/measurements.parquet), a results folder holding one (and a
published folder's workloads.parquet beside it), or a single measurement file. Its own systems are
compared: the rows it measured, not the published sets a sweep merges in (a file of published
rows alone is its own). One system a side: they are compared whatever their devices; several:
paired by device (cpu with cpu, cuda:0 with cuda:0), and a system with no partner is listed
alone. The ceilings are fitted and the claims judged afresh from the rows, by the workflow's steps
(experiments/analysis/compute.py, what experiments/steps/pipeline.py writes to files).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from experiments.analysis import claims, compute, datasheets, dataset, roofline
from experiments.analysis.units import finite, interval, num
from experiments.core.store import DatasetError

KEY = ["ceiling", "dtype"]
WITHIN, DIFFERS = "within noise", "differs"
MEASURED_DIFFERENTLY = "measured differently"
ONE_SIDE = "not measurable on one side"
NOISE = "within noise on one side"  # undecided there: its evidence sits at the threshold
WHY = (MEASURED_DIFFERENTLY, NOISE, ONE_SIDE)  # why two verdicts differ, the weightiest first


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


def _load_rows(file: Path) -> dataset.Dataset:
    """The dataset; a published folder's workloads.parquet beside it is merged in as its own."""
    extra = file.with_name("workloads.parquet")
    if file.name != "measurements.parquet" or not extra.is_file():
        return dataset.load(file)
    with tempfile.TemporaryDirectory() as tmp:
        merged = Path(tmp) / "merged.parquet"
        dataset.collect([file, extra], out=merged, log=lambda msg: None)
        return dataset.load(merged)


def load(path, sheets: list) -> Side:
    """Read one side and fit it (raises DatasetError naming the file)."""
    file = measurements(path)
    ds = _load_rows(file)
    ceilings, _, table = compute.judged(ds, sheets)  # the workflow's steps, in memory
    return Side(file, ds, ceilings, table)


def pairs(a: Side, b: Side) -> list[tuple[str | None, str | None]]:
    """(system of A, system of B) to compare; None where a system has no partner."""
    sa, sb = _measured_first(a), _measured_first(b)
    if len(sa) == 1 and len(sb) == 1:
        return [(sa.system[0], sb.system[0])]
    by_device = {}  # a device's system with the most rows beyond workloads (not a workload set)
    for s in sb.itertuples():
        by_device.setdefault(s.device, s.system)
    out = [(s.system, by_device.pop(s.device, None)) for s in sa.itertuples()]
    return out + [(None, s) for s in by_device.values()]


def _measured_first(side: Side) -> pd.DataFrame:
    """The side's systems, those with more rows beyond workloads first."""
    s = side.systems()
    rows = side.ds.rows
    n = [int(((rows.system == x) & (rows.experiment != "workload")).sum()) for x in s.system]
    return s.assign(_n=n).sort_values("_n", ascending=False, kind="stable").reset_index(drop=True)


def _ceilings(side: Side, system: str | None) -> pd.DataFrame:
    c = side.ceilings
    c = c[c.system == system] if system is not None else c.iloc[0:0]
    return c[KEY + ["unit", "value", "ci_low", "ci_high"]].assign(dtype=c.dtype.fillna(""))


def call(r) -> str:
    """Drift or noise: the two intervals overlap (within noise) or they do not (differs); a
    ceiling fitted on one side only says which."""
    if not finite(r["value_a"]) or not finite(r["value_b"]):
        return "fitted on A only" if finite(r["value_a"]) else "fitted on B only"
    lows, highs = (r["ci_low_a"], r["ci_low_b"]), (r["ci_high_a"], r["ci_high_b"])
    if not all(map(finite, lows + highs)):
        return WITHIN if r["value_a"] == r["value_b"] else "no interval"
    return WITHIN if max(lows) <= min(highs) else DIFFERS


def ceilings_table(a: Side, b: Side) -> pd.DataFrame:
    """One row per system pair and ceiling: A's value and interval, B's, B / A with its interval
    (B's bounds over A's), and the call."""
    out = []
    for sys_a, sys_b in pairs(a, b):
        ca, cb = _ceilings(a, sys_a), _ceilings(b, sys_b)
        both = ca.merge(cb, on=KEY, how="outer", suffixes=("_a", "_b"))
        both = both[both.value_a.notna() | both.value_b.notna()]  # fitted on neither: left out
        seen = pd.concat([ca, cb])  # in the fit's order, each ceiling's dtypes together
        rank = {col: {v: i for i, v in enumerate(dict.fromkeys(seen[col]))} for col in KEY}
        both = both.sort_values(KEY, key=lambda col: col.map(rank[col.name]))
        both["unit"] = both.unit_a.fillna(both.unit_b)
        both = both.assign(system_a=sys_a or "", system_b=sys_b or "",
                           label=both.ceiling.map(roofline.label), ratio=both.value_b / both.value_a,
                           ratio_low=both.ci_low_b / both.ci_high_a,
                           ratio_high=both.ci_high_b / both.ci_low_a)
        both["call"] = [call(r) for r in both.to_dict("records")] if len(both) else []
        out.append(both)
    cols = ["system_a", "system_b", "ceiling", "label", "dtype", "unit", "value_a", "ci_low_a",
            "ci_high_a", "value_b", "ci_low_b", "ci_high_b", "ratio", "ratio_low", "ratio_high",
            "call"]
    return pd.concat(out, ignore_index=True)[cols] if out else pd.DataFrame(columns=cols)


def why(verdict_a: str, verdict_b: str) -> str:
    """Why two verdicts differ: both judged and apart, or one side could not judge."""
    judged = {claims.HOLDS, claims.FAILS}
    if {verdict_a, verdict_b} <= judged:
        return MEASURED_DIFFERENTLY
    return NOISE if claims.UNDECIDED in {verdict_a, verdict_b} else ONE_SIDE


def claims_table(a: Side, b: Side) -> pd.DataFrame:
    """Every measured claim per system pair: the verdict on each side, whether they differ, and
    why (measured differently / not measurable on one side)."""
    def verdicts(side, system):
        t = side.claims[(side.claims.kind == claims.MEASURED) & (side.claims.system == system)]
        return t.set_index("claim")[["verdict", "measurement", "reason"]]

    out = []
    for sys_a, sys_b in pairs(a, b):
        both = verdicts(a, sys_a).merge(verdicts(b, sys_b), how="outer", left_index=True,
                                        right_index=True, suffixes=("_a", "_b"))
        both = both.reindex([c for c in claims.CLAIM_IDS if c in both.index])
        out.append(both.reset_index().assign(system_a=sys_a or "", system_b=sys_b or ""))
    cols = ["system_a", "system_b", "claim", "verdict_a", "verdict_b", "differ", "why",
            "measurement_a", "measurement_b", "reason_a", "reason_b"]
    if not out:
        return pd.DataFrame(columns=cols)
    table = pd.concat(out, ignore_index=True).fillna({"verdict_a": "", "verdict_b": "",
                                                      "reason_a": "", "reason_b": ""})
    table["differ"] = table.verdict_a != table.verdict_b
    table["why"] = [why(a, b) if d else "" for a, b, d in
                    zip(table.verdict_a, table.verdict_b, table["differ"])]
    return table[cols]


def workloads_table(a: Side, b: Side) -> pd.DataFrame:
    """The workloads both sides measured (same workload, dtype and batch): each side's time per
    call and B / A. A side that measured a point on several systems gives its measured-first
    system's (the one with more than workload rows)."""
    key = ["workload", "dtype", "batch"]

    def calls(side):
        placed, _ = compute.place_calls(side.ds, side.ceilings)
        if placed.empty:
            return pd.DataFrame(columns=key + ["time"])
        order = {s: i for i, s in enumerate(_measured_first(side).system)}
        placed = placed[placed.system.isin(order)].sort_values(
            "system", key=lambda col: col.map(order), kind="stable")
        return placed.drop_duplicates(key)[key + ["measured_time_s"]].rename(
            columns={"measured_time_s": "time"})

    both = calls(a).merge(calls(b), on=key, suffixes=("_a", "_b"))
    return both.assign(ratio=both.time_b / both.time_a)


def compare(path_a, path_b, datasheets_path) -> tuple[Side, Side, pd.DataFrame, pd.DataFrame]:
    sheets = datasheets.load(datasheets_path)
    a, b = load(path_a, sheets), load(path_b, sheets)
    return a, b, ceilings_table(a, b), claims_table(a, b)


def shown(ceilings: pd.DataFrame) -> pd.DataFrame:
    """The ceilings as a reader sees them: "4.29 TB/s [4.27, 4.33]", the ratio as 0.98x
    [0.96, 1.01], the call."""
    rows = ceilings.to_dict("records")
    return pd.DataFrame({
        "ceiling": [r["label"] + (f" {r['dtype']}" if r["dtype"] else "") for r in rows],
        "A": [interval(r["value_a"], r["ci_low_a"], r["ci_high_a"], r["unit"]) or "-"
              for r in rows],
        "B": [interval(r["value_b"], r["ci_low_b"], r["ci_high_b"], r["unit"]) or "-"
              for r in rows],
        "B/A": [_ratio(r) for r in rows],
        "call": [r["call"] for r in rows]}, columns=["ceiling", "A", "B", "B/A", "call"])


def _ratio(r) -> str:
    """B / A as 0.98x [0.96, 1.01] (two decimals between 0.01 and 100: ratios near 1 read as
    such), "-" where either side is not fitted."""
    def fmt(v):
        return f"{v:.2f}" if 0.01 <= abs(v) < 100 else num(v)
    if not finite(r["ratio"]):
        return "-"
    bounds = f" [{fmt(r['ratio_low'])}, {fmt(r['ratio_high'])}]" \
        if finite(r["ratio_low"]) and finite(r["ratio_high"]) else ""
    return f"{fmt(r['ratio'])}x{bounds}"


def columns(frame: pd.DataFrame) -> list[str]:
    """A table for a terminal, every column left-aligned."""
    cells = [list(frame.columns)] + frame.astype(str).values.tolist()
    widths = [max(len(row[i]) for row in cells) for i in range(len(frame.columns))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]


def text(a: Side, b: Side, ceilings: pd.DataFrame, table: pd.DataFrame) -> str:
    """The comparison for a terminal: per system pair its ceilings and calls, then the claims
    that differ, grouped by why."""
    lines = [f"A: {a.path}", f"B: {b.path}"]
    for (sys_a, sys_b), group in ceilings.groupby(["system_a", "system_b"], sort=False):
        lines += ["", f"{sys_a or '(none)'}  vs  {sys_b or '(none)'}"]
        lines += columns(shown(group)) if len(group) else [
            "  no ceilings fitted"]
        lines.append(f"  {(group.call == DIFFERS).sum()} of {len(group)} ceilings differ "
                     "beyond their intervals")
    differ = table[table["differ"]]
    lines.append("")
    if differ.empty:
        lines.append(f"Claims: all {table.claim.nunique()} measured claims have the same verdict "
                     "on both")
        return "\n".join(lines)
    several = table[["system_a", "system_b"]].drop_duplicates().shape[0] > 1
    for reason in WHY:
        group = differ[differ.why == reason]
        if group.empty:
            continue
        lines.append(f"Claims that differ, {reason} ({len(group)}):")
        for r in group.itertuples():
            pair = f"  [{r.system_a or '(none)'} vs {r.system_b or '(none)'}]" if several else ""
            lines.append(f"  {r.claim:<4} A: {r.verdict_a or '-':<20} B: {r.verdict_b or '-'}"
                         + pair)
    return "\n".join(lines)


def rows_csv(ceilings: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """One CSV: the ceilings (raw numbers, intervals, ratio, call) and then the claims."""
    c = ceilings.assign(kind="ceiling", name=ceilings.ceiling)
    k = table.rename(columns={"why": "call"}).assign(kind="claim", name=table.claim)
    k["call"] = k.call.where(k["differ"], "same")
    cols = ["kind", "system_a", "system_b", "name", "dtype", "unit", "value_a", "ci_low_a",
            "ci_high_a", "value_b", "ci_low_b", "ci_high_b", "ratio", "ratio_low", "ratio_high",
            "call", "verdict_a", "verdict_b", "reason_a", "reason_b"]
    return pd.concat([c, k], ignore_index=True).reindex(columns=cols)
