"""`rooflab compare` for people: the cells both the terminal and the page show, what differs
first, and the terminal's text."""

from __future__ import annotations

import pandas as pd

from experiments.analysis.units import finite, interval, num, share
from experiments.report.compare import (DIFFERS, MEASURED_DIFFERENTLY, MIN_CHANGE, SMALL, WHY,
                                        WITHIN, Side, alone, labels, shared)

# what a call means, said once on the page and in the terminal
RULE = (f"{DIFFERS}: each value outside the other's interval (where a repeat lands) and the "
        f"values at least {share(MIN_CHANGE)} apart (the run-to-run spread of a GPU's ceilings); "
        f"{SMALL}: so, but by less; {WITHIN}: otherwise")
INTERVALS = ("a ceiling: on a GPU the median of its top plateau [95 % bootstrap interval], on a "
             "CPU the best point [the plateau's range]; a workload: the median time per call [its "
             "10-90 % spread]; each widened to at least the run-to-run spread of its kind on its "
             "device")


def name(r) -> str:
    return r["label"] + (f" {r['dtype']}" if r["dtype"] else "")


def ratio(r) -> str:
    """B / A as 0.98x [0.96, 1.01] (two decimals between 0.01 and 100: ratios near 1 read as
    such); nothing where either side has no value."""
    def fmt(v):
        return f"{v:.2f}" if 0.01 <= abs(v) < 100 else num(v)
    if not finite(r["ratio"]):
        return ""
    bounds = f" [{fmt(r['ratio_low'])}, {fmt(r['ratio_high'])}]" \
        if finite(r["ratio_low"]) and finite(r["ratio_high"]) else ""
    return f"{fmt(r['ratio'])}x{bounds}"


def shown(ceilings: pd.DataFrame) -> pd.DataFrame:
    """The ceilings as a reader sees them: "4.29 TB/s [4.27, 4.33]", the ratio as 0.98x
    [0.96, 1.01], the call."""
    rows = ceilings.to_dict("records")
    return pd.DataFrame({
        "ceiling": [name(r) for r in rows],
        "A": [interval(r["value_a"], r["ci_low_a"], r["ci_high_a"], r["unit"]) for r in rows],
        "B": [interval(r["value_b"], r["ci_low_b"], r["ci_high_b"], r["unit"]) for r in rows],
        "B/A": [ratio(r) for r in rows],
        "call": [r["call"] for r in rows]}, columns=["ceiling", "A", "B", "B/A", "call"])


def raw(frame: pd.DataFrame, *extra: str) -> list[dict]:
    """Per row the numbers behind its cells, for the page's sorting and CSV (data-v): A, B,
    B/A and the `extra` columns, finite ones only."""
    keys = {"A": "value_a", "B": "value_b", "B/A": "ratio"} | {k: k for k in extra}
    return [{k: float(r[c]) for k, c in keys.items() if finite(r[c])}
            for r in frame.to_dict("records")]


def shown_calls(calls: pd.DataFrame) -> pd.DataFrame:
    """The workloads as a reader sees them: device, workload, dtype, batch, both times with
    their spread, B / A and the call."""
    rows = calls.to_dict("records")
    return pd.DataFrame({
        "device": [r["device_a"] if r["device_a"] == r["device_b"]
                   else f"{r['device_a']} / {r['device_b']}" for r in rows],
        "workload": [r["workload"] for r in rows], "dtype": [r["dtype"] for r in rows],
        "batch": [num(r["batch"]) for r in rows],
        "A": [interval(r["value_a"], r["ci_low_a"], r["ci_high_a"], "s") for r in rows],
        "B": [interval(r["value_b"], r["ci_low_b"], r["ci_high_b"], "s") for r in rows],
        "B/A": [ratio(r) for r in rows], "call": [r["call"] for r in rows]},
        columns=["device", "workload", "dtype", "batch", "A", "B", "B/A", "call"])


def differences(ceilings: pd.DataFrame, table: pd.DataFrame) -> list[dict]:
    """Per system pair, what differs: the ceilings (name and B / A) and the verdicts (claim,
    A's, B's), for the first screen."""
    out = []
    for (sys_a, sys_b), c in ceilings.groupby(["system_a", "system_b"], sort=False):
        t = table[(table.system_a == sys_a) & (table.system_b == sys_b) & table["differ"]]
        out.append({"a": sys_a, "b": sys_b, "n": len(c),
                    "ceilings": [f"{name(r)} {ratio(r)}" for r in
                                 c[c.call == DIFFERS].to_dict("records")]} | _verdicts(t))
    seen = {(d["a"], d["b"]) for d in out}
    for (sys_a, sys_b), t in table.groupby(["system_a", "system_b"], sort=False):
        if (sys_a, sys_b) not in seen:  # no ceiling fitted on either: verdicts alone
            out.append({"a": sys_a, "b": sys_b, "n": 0, "ceilings": []}
                       | _verdicts(t[t["differ"]]))
    return out


def _verdicts(t: pd.DataFrame) -> dict:
    """A pair's differing verdicts: "verdicts", judged on both sides and apart (holds / does not
    hold), and "unsettled", where one side is undecided or could not judge: not a difference."""
    def said(r):
        return f"{r['claim']} ({r['verdict_a'] or 'not judged'} -> " \
            f"{r['verdict_b'] or 'not judged'})"
    apart = t["why"] == MEASURED_DIFFERENTLY
    return {"verdicts": [said(r) for r in t[apart].to_dict("records")],
            "unsettled": [said(r) for r in t[~apart].to_dict("records")]}


def one_line(s: dict) -> str:
    return f"only on {s['side']}: {s['system']} ({s['device']}): {s['why']}"


def columns(frame: pd.DataFrame) -> list[str]:
    """A table for a terminal, every column left-aligned."""
    cells = [list(frame.columns)] + frame.astype(str).values.tolist()
    widths = [max(len(row[i]) for row in cells) for i in range(len(frame.columns))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]


def text(a: Side, b: Side, ceilings: pd.DataFrame, table: pd.DataFrame,
         calls: pd.DataFrame | None = None) -> str:
    """The comparison for a terminal: what differs first, then per system pair its ceilings and
    calls, the claims that differ grouped by why, the one-sided systems in a line each, and the
    workloads both measured."""
    la, lb = labels(a, b)
    lines = [f"A: {la}", f"B: {lb}", *shared(a, b), f"calls: {RULE}.", f"intervals: {INTERVALS}.",
             ""]
    for d in differences(ceilings, table):
        lines.append(f"{d['a']}  vs  {d['b']}: {len(d['ceilings'])} of {d['n']} ceilings differ, "
                     f"{len(d['verdicts'])} verdicts differ"
                     + (f" ({len(d['unsettled'])} more unsettled on one side)"
                        if d["unsettled"] else ""))
        lines += [f"  {what}: {'; '.join(d[what])}" for what in ("ceilings", "verdicts")
                  if d[what]]
    lines += [one_line(s) for s in alone(a, b)]
    for (sys_a, sys_b), group in ceilings.groupby(["system_a", "system_b"], sort=False):
        lines += ["", f"{sys_a}  vs  {sys_b}", *columns(shown(group))]
    differ = table[table["differ"]]
    lines.append("")
    if differ.empty:
        lines.append(f"Claims: all {table.claim.nunique()} measured claims have the same verdict "
                     "on both")
    several = table[["system_a", "system_b"]].drop_duplicates().shape[0] > 1
    for reason in WHY:
        group = differ[differ.why == reason]
        if group.empty:
            continue
        lines.append(f"Claims that differ, {reason} ({len(group)}):")
        for r in group.itertuples():
            pair = f"  [{r.system_a} vs {r.system_b}]" if several else ""
            lines.append(f"  {r.claim:<4} A: {r.verdict_a or '-':<20} B: {r.verdict_b or '-'}"
                         + pair)
    if calls is not None and len(calls):
        n = int((calls.call == DIFFERS).sum())
        lines += ["", f"Workloads measured on both ({len(calls)}; {n} differ; time per call, "
                      f"B/A above 1: B is slower):", *columns(shown_calls(calls))]
    return "\n".join(lines)
