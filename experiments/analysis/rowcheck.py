"""Rows no step reads: a copy of a row already read, and a row that cannot be true.

`dataset.collect` (each measurement file) and `dataset.load` (the file every later step reads)
both pass their rows through here, so a row one of them leaves out none reads, and each file's
left-out rows are said in one line that names it:

    FILE: 12 rows dropped: time_s not positive and finite (8), measured_at in the future (4)

A copy has every schema column equal to a row read before, run_id included: a job writes a fresh
run_id and stamps each row's measured_at to the microsecond, so two measurements never match.

A row cannot be true when
- its median time is there but not positive and finite, or missing from an ok row that counts
  work (an ok row that times nothing, and a row not ok, have none), or a time of its spread is
  negative or infinite (null: not recorded);
- it was measured more than CLOCK_SKEW in the future;
- a rate reads above what a device can do, by FACTOR: FLOP/s above FACTOR x the highest peak of
  the device's datasheet (of any datasheet where none matches it or gives FLOPs); B/s above
  FACTOR x CACHE_HEADROOM x the fastest memory of any datasheet, as a datasheet gives DRAM's
  bandwidth and caches run far past it (an H200's L1 rows read 6x its DRAM; one CPU core's L1
  can read 256 GB/s, so 192 such cores 10x an H200's DRAM): no device's own figure bounds its
  B/s. Rows timed by the launch only (schema.LAUNCH_ONLY_TIMER) are exempt.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pyarrow as pa

from experiments.analysis import datasheets
from experiments.analysis.units import qty
from experiments.core.paths import config_dir
from experiments.core.schema import LAUNCH_ONLY_TIMER, SCHEMA

SPREAD = ("time_s_min", "time_s_q10", "time_s_q25", "time_s_q75", "time_s_q90", "time_s_mean",
          "time_s_std")
CLOCK_SKEW = pd.Timedelta(days=1)  # a machine's clock set a little ahead still measured now
FACTOR = 10.0  # a rate this far past a device's figure is a unit slip, never a fast run
CACHE_HEADROOM = 10.0  # the most caches run past the fastest DRAM (the docstring's cases)
COPY = "same run_id and content"
DROPPED = " rows dropped: "  # in every line that says a file's rows were left out
_READS = ["status", "time_s", *SPREAD, "flops", "bytes", "flop_per_s", "byte_per_s", "timer",
          "device_name", "measured_at"]


# ---- copies -------------------------------------------------------------------------------

def row_keys(table: pa.Table) -> pd.Series:
    """One key per row: its every schema column (run_id included), as JSON."""
    columns = table.select(SCHEMA.names).to_pydict()
    return pd.Series([json.dumps(values, default=str) for values in zip(*columns.values())],
                     dtype=object)


def drop_copies(table: pa.Table, path, seen: dict) -> tuple[pa.Table, dict[str, int]]:
    """The table less its copies: rows equal to one of `seen` (row key -> the file it was first
    read from) or to a row above them in the table; the rows kept join `seen`. Also returns
    {the file holding the kept row: rows dropped}, this file's own copies under its path."""
    keys = row_keys(table)
    first = keys.map(seen).astype(object)
    first = first.mask(first.isna() & keys.duplicated(), str(path))
    dropped = first.notna().to_numpy()
    seen.update(dict.fromkeys(keys[~dropped], str(path)))
    counts = first[dropped].value_counts()
    return table.filter(pa.array(~dropped)), {k: int(counts[k]) for k in sorted(counts.index)}


def copies_line(path, kept: str, rows: int) -> str:
    if kept == str(path):
        return f"rooflab: {path}: {rows}{DROPPED}copies of rows above them in it ({COPY})"
    return f"rooflab: {rows} rows of {path} are already in {kept} ({COPY}); collected once"


# ---- rows that cannot be true ---------------------------------------------------------------

def rate_caps(names: pd.Series, sheets: list) -> tuple[float, pd.Series, pd.Series]:
    """The B/s cap of every device, and per row of `names` (device names) its FLOP/s cap and the
    figure it is FACTOR times ("its datasheet's peak" or "any datasheet's peak")."""
    bandwidths = [s.bandwidth_Bps for s in sheets if s.bandwidth_Bps]
    byte_cap = FACTOR * CACHE_HEADROOM * max(bandwidths) if bandwidths else math.inf
    peaks = {s.name: max([*s.vector.values(), *s.matrix.values()], default=0) for s in sheets}
    anyone = max(peaks.values(), default=0)
    cap, figure = {}, {}
    for name in names.dropna().unique():  # a regular expression per datasheet: per name
        sheet = datasheets.find(sheets, name)
        own = peaks.get(sheet.name) if sheet is not None else None
        cap[name] = FACTOR * (own or anyone) if own or anyone else math.inf
        figure[name] = "its datasheet's peak" if own else "any datasheet's peak"
    fallback = FACTOR * anyone if anyone else math.inf
    return (byte_cap, names.map(cap).fillna(fallback).astype(float),
            names.map(figure).astype(object).fillna("any datasheet's peak"))


def reasons(rows: pd.DataFrame, sheets: list, now: pd.Timestamp | None = None) -> pd.Series:
    """Why each row cannot be true (the first reason that applies), None where it can."""
    ok = rows.status == "ok"
    t = rows.time_s.astype(float)
    work = (rows.flops.fillna(0) > 0) | (rows.bytes.fillna(0) > 0)
    spread = rows[list(SPREAD)].astype(float)
    byte_cap, flop_cap, figure = rate_caps(rows.device_name, sheets)
    rated = rows.timer.fillna("") != LAUNCH_ONLY_TIMER
    now = now if now is not None else pd.Timestamp.now(tz="UTC")
    flop_text = ("flop_per_s above " + flop_cap.map(lambda c: qty(c, "FLOP/s"))
                 + f" ({FACTOR:g}x " + figure + ")")
    checks = [
        ((t.notna() & ~(np.isfinite(t) & (t > 0))) | (ok & work & t.isna()),
         "time_s not positive and finite"),
        (((spread < 0) | np.isinf(spread)).any(axis=1), "a time_s_* of its spread negative or "
                                                          "infinite"),
        (rows.measured_at > now + CLOCK_SKEW, "measured_at in the future"),
        (rated & (rows.byte_per_s > byte_cap),
         f"byte_per_s above {qty(byte_cap, 'B/s')} ({FACTOR * CACHE_HEADROOM:g}x the fastest "
         "datasheet memory)"),
        (rated & (rows.flop_per_s > flop_cap), flop_text),
    ]
    why = pd.Series(None, index=rows.index, dtype=object)
    for mask, text in checks:
        why = why.where(why.notna() | ~mask.fillna(False).astype(bool), text)
    return why


def refuse(table: pa.Table, sheets: list, now: pd.Timestamp | None = None
           ) -> tuple[pa.Table, dict[str, int]]:
    """The table less its rows that cannot be true, and {reason: rows dropped}, most first."""
    why = reasons(table.select(_READS).to_pandas(), sheets, now)
    dropped = why.notna().to_numpy()
    counts = sorted(why[dropped].value_counts().items(), key=lambda kv: (-kv[1], kv[0]))
    return table.filter(pa.array(~dropped)), {k: int(v) for k, v in counts}


def refused_line(path, counts: dict[str, int]) -> str:
    """'rooflab: FILE: 12 rows dropped: time_s not positive and finite (8), ...'."""
    return (f"rooflab: {path}: {sum(counts.values())}{DROPPED}"
            + ", ".join(f"{why} ({n})" for why, n in counts.items()))


def reference_sheets(path=None) -> list:
    """The datasheets the rate limits come from: `path`, else config/datasheets.yaml."""
    return datasheets.load(path or config_dir() / "datasheets.yaml")
