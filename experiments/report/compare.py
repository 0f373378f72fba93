"""Two datasets side by side: each ceiling on both with its interval, the ratio B / A with its
interval and a call, the claims whose verdicts differ grouped by why, and the workloads both
measured, matched by system and device. compare_text.py writes it for a terminal,
compare_page.py as a page.

A side is a merged dataset (results/measurements.parquet), a results folder holding one (and a
published folder's workloads.parquet beside it), or a single measurement file. Its own systems are
compared: the rows it measured, not the published sets a sweep merges in (a file of published
rows alone is its own). One system a side: they are compared whatever their devices; several:
paired by device (cpu with cpu, cuda:0 with cuda:0). A system with no partner, or one that holds
only workload rows (nothing to fit or judge), is one-sided: named in one line; a workload-only
system's calls join the pair of its side's system of the same device model. The ceilings are
fitted and the claims judged afresh from the rows, by the workflow's steps
(experiments/analysis/compute.py, what experiments/steps/pipeline.py writes to files).

A ceiling "differs" when each value lies outside the other's interval AND the values are at
least MIN_CHANGE apart. An interval is a promise about where a repeat on its machine lands
(plateaus.RUN_TO_RUN): a ceiling's, and a workload's 10-90 % spread widened to the run-to-run
spread of its device's calls. So a value outside both promises is one neither side's noise
explains: past the larger of the two noises, where nvbench_compare calls a change past the
smaller.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from experiments.analysis import (claims, compute, datasheets, dataset, health, plateaus, roofline,
                                  silicon)
from experiments.analysis.units import finite, share
from experiments.core import layout
from experiments.core.store import DatasetError

KEY = ["ceiling", "dtype"]
WORKLOAD_KEY = ["workload", "dtype", "batch"]
# the GPU's run-to-run spread (plateaus.RUN_TO_RUN): a smaller change is clocks, not the machine
MIN_CHANGE = 0.05
WITHIN, SMALL, DIFFERS = "within noise", f"under {share(MIN_CHANGE)}", "differs"
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
        path = layout.file(path, "dataset")
        if not path.is_file():
            raise DatasetError(f"{path} not found: a results folder holds it once `rooflab run` "
                               "has collected its measurements")
    elif not path.exists():
        raise DatasetError(f"{path}: no such file or folder")
    return path


def _load_rows(file: Path) -> dataset.Dataset:
    """The dataset; a published folder's workloads.parquet beside it is merged in as its own."""
    extra = file.with_name(layout.PUBLISHED_MEASUREMENTS["workloads"])
    if file.name != layout.PUBLISHED_MEASUREMENTS["sweep"] or not extra.is_file():
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


def labels(a: Side, b: Side) -> tuple[str, str]:
    """What names each side for a reader: the last parts of its folder that tell the two apart
    ("run1/results" and "run2/results"), and its hosts; the same folder twice: its hosts."""
    def parts(side):
        p = Path(str(side.path))
        return (p.parent if p.name == layout.AGGREGATE["dataset"] else p).absolute().parts[1:]

    pa, pb = parts(a), parts(b)
    n = 1
    while n < max(len(pa), len(pb)) and pa[-n:] == pb[-n:]:
        n += 1
    out = []
    for side, p in ((a, pa), (b, pb)):
        hosts = ", ".join(dict.fromkeys(side.systems().host))
        out.append(f"{'/'.join(p[-n:]) if pa != pb else p[-1] if p else '/'} ({hosts})")
    return out[0], out[1]


def _rows_beyond_workloads(side: Side) -> pd.DataFrame:
    """The side's systems with how many of their rows are not workload rows, those with more
    first (a workload-only system has none)."""
    s = side.systems()
    rows = side.ds.rows
    n = [int(((rows.system == x) & (rows.experiment != "workload")).sum()) for x in s.system]
    return s.assign(_n=n).sort_values("_n", ascending=False, kind="stable").reset_index(drop=True)


def _fitted(side: Side) -> pd.DataFrame:
    """The systems that can be compared (rows beyond workloads; all where none has any)."""
    s = _rows_beyond_workloads(side)
    return s[s._n > 0].reset_index(drop=True) if (s._n > 0).any() else s


def pairs(a: Side, b: Side) -> list[tuple[str | None, str | None]]:
    """(system of A, system of B) to compare; None where a system has no partner."""
    sa, sb = _fitted(a), _fitted(b)
    if len(sa) == 1 and len(sb) == 1:
        return [(sa.system[0], sb.system[0])]
    by_device = {}  # a device's system with the most rows beyond workloads
    for s in sb.itertuples():
        by_device.setdefault(s.device, s.system)
    out = [(s.system, by_device.pop(s.device, None)) for s in sa.itertuples()]
    return out + [(None, s) for s in by_device.values()]


def both(pair_list) -> list[tuple[str, str]]:
    """The pairs with a system on both sides: those with ceilings and claims to compare."""
    return [(x, y) for x, y in pair_list if x is not None and y is not None]


def slots(a: Side, b: Side) -> dict[tuple[str, str], int]:
    """("A" or "B", system) -> the index in both(pairs) whose workloads it is compared beside:
    its own pair, else (a workload-only system) the pair of its side's system of the same device
    model, else of the same device; a system in none is left out."""
    paired = both(pairs(a, b))
    out = {}
    for i, tag, side in ((0, "A", a), (1, "B", b)):
        mine = side.systems().set_index("system")
        for system, s in mine.iterrows():
            own = [k for k, p in enumerate(paired) if p[i] == system]
            same = [k for k, p in enumerate(paired) if mine.device_name.get(p[i]) == s.device_name]
            near = [k for k, p in enumerate(paired) if mine.device.get(p[i]) == s.device]
            found = (own or same or near)[:1]
            if found:
                out[(tag, system)] = found[0]
    return out


def alone(a: Side, b: Side) -> list[dict]:
    """The one-sided systems, one line each: on which side, its device, why it stands alone."""
    pair_list = pairs(a, b)
    paired = both(pair_list)
    placed = slots(a, b)
    out = []
    for tag, i, side in (("A", 0, a), ("B", 1, b)):
        fitted = set(_fitted(side).system)
        partners = {p[i] for p in pair_list if p[i] is not None and p[1 - i] is None}
        for s in _rows_beyond_workloads(side).itertuples():
            if s.system in fitted and s.system not in partners:
                continue
            if s.system in fitted:
                why = f"no {s.device} on {'B' if tag == 'A' else 'A'}"
            else:
                k = placed.get((tag, s.system))
                why = "workload rows only" + (
                    f"; its workloads are compared beside {paired[k][i]}" if k is not None
                    else "; no system of its device to compare its workloads beside")
            out.append({"side": tag, "system": s.system, "device": s.device, "why": why})
    return out


def shared(a: Side, b: Side) -> list[str]:
    """One line per device of either side that another tenant shared in its run ("B: shared CPU:
    ..."): its ceilings are that moment's, so a difference there may be the tenant's, not the
    machine's. The summary's first lines (health.shared_gpus, silicon.shared_cpus)."""
    out = []
    for tag, side in (("A", a), ("B", b)):
        own = set(side.systems().system)
        rows = side.ds.rows[side.ds.rows.system.isin(own)]
        lines = health.shared_gpus(rows) + silicon.shared_cpus(
            side.ceilings[side.ceilings.system.isin(own)])
        out += [f"{tag}: {line}" for line in lines]
    return out


def _devices(a: Side, b: Side, sys_a: str, sys_b: str) -> dict:
    """A pair's systems and their devices, the columns every row of the pair carries."""
    def device(side, system):
        return side.systems().set_index("system").device.get(system, "")
    return {"system_a": sys_a, "device_a": device(a, sys_a), "system_b": sys_b,
            "device_b": device(b, sys_b)}


def _ceilings(side: Side, system: str) -> pd.DataFrame:
    c = side.ceilings[side.ceilings.system == system]
    return c[KEY + ["unit", "value", "ci_low", "ci_high"]].assign(dtype=c.dtype.fillna(""))


def apart(value_a, value_b) -> bool:
    """At least MIN_CHANGE apart, either way (B 5 % above A, or A 5 % above B)."""
    low, high = sorted((abs(value_a), abs(value_b)))
    return low == 0 and high > 0 or low > 0 and high / low >= 1 + MIN_CHANGE


def call(r) -> str:
    """Drift or noise: within noise where either value lies inside the other's interval (where a
    repeat lands); past that, under 5 % where the values are less than MIN_CHANGE apart, differs
    where they are not. A value on one side only says which; no interval on a side: no call."""
    a, b = r["value_a"], r["value_b"]
    if not finite(a) or not finite(b):
        return "fitted on A only" if finite(a) else "fitted on B only"
    lows, highs = (r["ci_low_a"], r["ci_low_b"]), (r["ci_high_a"], r["ci_high_b"])
    if not all(map(finite, lows + highs)):
        return WITHIN if a == b else "no interval"
    if lows[0] <= b <= highs[0] or lows[1] <= a <= highs[1]:
        return WITHIN
    return DIFFERS if apart(a, b) else SMALL


def _with_ratio(frame: pd.DataFrame) -> pd.DataFrame:
    """B / A with its interval (B's bounds over A's), and the call."""
    frame = frame.assign(ratio=frame.value_b / frame.value_a,
                         ratio_low=frame.ci_low_b / frame.ci_high_a,
                         ratio_high=frame.ci_high_b / frame.ci_low_a)
    frame["call"] = [call(r) for r in frame.to_dict("records")] if len(frame) else []
    return frame


CEILING_COLUMNS = ["system_a", "device_a", "system_b", "device_b", "ceiling", "label", "dtype",
                   "unit", "value_a", "ci_low_a", "ci_high_a", "value_b", "ci_low_b",
                   "ci_high_b", "ratio", "ratio_low", "ratio_high", "call"]


def ceilings_table(a: Side, b: Side) -> pd.DataFrame:
    """One row per system pair and ceiling: A's value and interval, B's, B / A with its interval
    (B's bounds over A's), and the call."""
    out = []
    for sys_a, sys_b in both(pairs(a, b)):
        ca, cb = _ceilings(a, sys_a), _ceilings(b, sys_b)
        t = ca.merge(cb, on=KEY, how="outer", suffixes=("_a", "_b"))
        t = t[t.value_a.notna() | t.value_b.notna()]  # fitted on neither: left out
        seen = pd.concat([ca, cb])  # in the fit's order, each ceiling's dtypes together
        rank = {col: {v: i for i, v in enumerate(dict.fromkeys(seen[col]))} for col in KEY}
        t = t.sort_values(KEY, key=lambda col: col.map(rank[col.name]))
        t["unit"] = t.unit_a.fillna(t.unit_b)
        out.append(_with_ratio(t.assign(**_devices(a, b, sys_a, sys_b),
                                        label=t.ceiling.map(roofline.label))))
    return pd.concat(out, ignore_index=True)[CEILING_COLUMNS] if out \
        else pd.DataFrame(columns=CEILING_COLUMNS)


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
    for sys_a, sys_b in both(pairs(a, b)):
        t = verdicts(a, sys_a).merge(verdicts(b, sys_b), how="outer", left_index=True,
                                     right_index=True, suffixes=("_a", "_b"))
        t = t.reindex([c for c in claims.CLAIM_IDS if c in t.index])
        out.append(t.reset_index().assign(**_devices(a, b, sys_a, sys_b)))
    cols = ["system_a", "device_a", "system_b", "device_b", "claim", "verdict_a", "verdict_b",
            "differ", "why", "measurement_a", "measurement_b", "reason_a", "reason_b"]
    if not out:
        return pd.DataFrame(columns=cols)
    table = pd.concat(out, ignore_index=True).fillna({"verdict_a": "", "verdict_b": "",
                                                      "reason_a": "", "reason_b": ""})
    table["differ"] = table.verdict_a != table.verdict_b
    table["why"] = [why(a, b) if d else "" for a, b, d in
                    zip(table.verdict_a, table.verdict_b, table["differ"])]
    return table[cols]


def repeatable_calls(calls: pd.DataFrame) -> pd.DataFrame:
    """Workload calls (value, ci_low, ci_high, device_kind), each interval widened to at least the
    run-to-run spread of its device kind's calls (plateaus.RUN_TO_RUN "workload"): where a
    repeat's time per call lands, as a ceiling's interval is."""
    f = calls.device_kind.map(
        lambda k: plateaus.RUN_TO_RUN[plateaus.floor_kind(k)]["workload"]).astype(float)
    return calls.assign(ci_low=calls.ci_low.fillna(calls.value).clip(upper=calls.value / (1 + f)),
                        ci_high=calls.ci_high.fillna(calls.value).clip(lower=calls.value * (1 + f)))


def workload_calls(rows: pd.DataFrame) -> pd.DataFrame:
    """The whole workload calls among `rows` (ok, timed): time per call (the point's median) as
    value and its interval (repeatable_calls), keyed by system, device, workload, dtype, batch."""
    w = rows[(rows.experiment == "workload") & (rows.status == "ok")]
    if "variant" in w:
        w = w[w.variant.fillna("") != "aten_op"]
    w = w[w.time_s > 0].rename(columns={"op": "workload", "time_s": "value",
                                        "time_s_q10": "ci_low", "time_s_q90": "ci_high"})
    cols = ["system", "device", "device_kind"] + WORKLOAD_KEY + ["value", "ci_low", "ci_high"]
    return repeatable_calls(w.reindex(columns=cols))


def _calls(side: Side, tag: str, placed: dict) -> pd.DataFrame:
    """A side's workload_calls with their pair's index; a key measured by several systems of one
    pair: the one with more rows beyond workloads."""
    w = workload_calls(side.ds.rows)
    w = w.assign(slot=[placed.get((tag, s)) for s in w.system])
    w = w[w.slot.notna()]
    order = {s: i for i, s in enumerate(_rows_beyond_workloads(side).system)}
    w = w.sort_values("system", key=lambda col: col.map(order), kind="stable")
    return w.drop_duplicates(["slot"] + WORKLOAD_KEY)


WORKLOAD_COLUMNS = ["system_a", "device_a", "system_b", "device_b", "workload", "dtype", "batch",
                    "value_a", "ci_low_a", "ci_high_a", "value_b", "ci_low_b", "ci_high_b",
                    "ratio", "ratio_low", "ratio_high", "call"]


def workloads_table(a: Side, b: Side) -> pd.DataFrame:
    """The workload points both sides measured, matched by system pair (and so by device: a CPU
    and a GPU row of one workload, dtype and batch are two rows) and by workload, dtype and
    batch: each side's time per call with its interval (_calls), B / A and the call."""
    placed = slots(a, b)
    t = _calls(a, "A", placed).merge(_calls(b, "B", placed), on=["slot"] + WORKLOAD_KEY,
                                     suffixes=("_a", "_b"))
    if t.empty:
        return pd.DataFrame(columns=WORKLOAD_COLUMNS)
    t = _with_ratio(t.sort_values(["slot"] + WORKLOAD_KEY, kind="stable"))
    return t.reset_index(drop=True)[WORKLOAD_COLUMNS]


def compare(path_a, path_b, datasheets_path) -> tuple[Side, Side, pd.DataFrame, pd.DataFrame]:
    sheets = datasheets.load(datasheets_path)
    a, b = load(path_a, sheets), load(path_b, sheets)
    return a, b, ceilings_table(a, b), claims_table(a, b)


def rows_csv(ceilings: pd.DataFrame, table: pd.DataFrame,
             calls: pd.DataFrame | None = None) -> pd.DataFrame:
    """One CSV, raw numbers: the ceilings (intervals, ratio, call), the claims, the workloads
    (time per call in s, the 10-90 % spread as the interval, each side's device)."""
    c = ceilings.assign(kind="ceiling", name=ceilings.ceiling)
    k = table.rename(columns={"why": "call"}).assign(kind="claim", name=table.claim)
    k["call"] = k.call.where(k["differ"], "same")
    parts = [c, k]
    if calls is not None and len(calls):
        parts.append(calls.assign(kind="workload", name=calls.workload, unit="s"))
    cols = ["kind", "system_a", "device_a", "system_b", "device_b", "name", "dtype", "batch",
            "unit", "value_a", "ci_low_a", "ci_high_a", "value_b", "ci_low_b", "ci_high_b",
            "ratio", "ratio_low", "ratio_high", "call", "verdict_a", "verdict_b", "reason_a",
            "reason_b"]
    return pd.concat([p for p in parts if len(p)] or [c], ignore_index=True).reindex(columns=cols)
