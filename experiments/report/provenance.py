"""Where each system's numbers came from: device facts, versions, commits, configs, device state,
when and how long its jobs ran."""

from __future__ import annotations

from collections import Counter

import pandas as pd

from experiments.analysis.dataset import Dataset
from experiments.analysis.units import binary, finite, memory, num, qty, words


def provenance(ds: Dataset) -> list[dict]:
    """Per system: device facts, versions, commits, config hashes, device state at start/end."""
    out = []
    for _, s in ds.systems().iterrows():
        metas = ds.file_metas(s.system)
        facts = ds.facts(s.system)
        commits = Counter((m.get("git") or {}).get("commit", "")[:12] + (
            " (dirty)" if (m.get("git") or {}).get("dirty") else "") for m in metas)
        codes = Counter(m.get("code") for m in metas if m.get("code"))
        packages = next((m.get("packages") for m in metas if m.get("packages")), {})
        starts = [m.get("device_state_start") for m in metas if m.get("device_state_start")]
        ends = [m.get("device_state_end") for m in metas if m.get("device_state_end")]
        rows = ds.rows[ds.rows.system == s.system]
        # a pool's jobs ran on its GPUs: say which ran how many (files before pools: `device`)
        ran_on = Counter(m.get("measured_on") or m.get("device") for m in metas)
        configs = sorted({m.get("config_hash") for m in metas if m.get("config_hash")})
        out.append({
            "system": s.system, "source": s.source, "host": s.host, "device": s.device,
            "kind": s.device_kind, "name": s.device_name,
            "facts": [(words(k), fact(k, v)) for k, v in facts.items()
                      if v not in (None, "", {}) and k not in ("device", "host", "name")],
            "packages": sorted(packages.items()),
            "commits": ", ".join(f"{c or 'unknown'} ({n} files)" for c, n in commits.items()),
            # the package's files as they ran: what a commit cannot say of a dirty or copied tree
            "code": ", ".join(f"{c} ({n} files)" for c, n in codes.items()),
            # one hash per job's settings: a count, the list a click away
            "configs": configs, "files": len(metas), "rows": len(rows),
            "ran_on": ", ".join(f"{d} ({n} files)" for d, n in sorted(ran_on.items()))
            if set(ran_on) != {s.device} else "",
            "experiments": ", ".join(sorted(rows.experiment.unique())),
            "state_start": _state(starts[0] if starts else {}),
            "state_end": _state(ends[-1] if ends else {}),
            "measured": span(rows.measured_at),
        })
    return out


def _state(state: dict) -> str:
    return ", ".join(f"{words(k)} {num(v) if finite(v) else v}" for k, v in sorted(state.items())
                     if v not in (None, ""))


def fact(key, value) -> str:
    """A device fact as a person reads it: sizes in their units, memory in GiB, nested settings
    as words and numbers (never a Python dict or list)."""
    size = binary if "llc" in key or "cache" in key else memory if key == "memory_bytes" \
        else (lambda v: qty(v, "B"))
    if "bytes" in key and finite(value):
        return size(value)
    if isinstance(value, dict):
        def nested(k, v):
            text = fact(key if "bytes" in key else str(k), v)
            return f"({text})" if isinstance(v, dict) else text
        return ", ".join(f"{words(str(k))} {nested(k, v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return _runs(value) if all(isinstance(v, int) for v in value) else \
            ", ".join(fact(key, v) for v in value)
    if isinstance(value, float) and finite(value):
        return num(value)
    return str(value)


def _runs(values) -> str:
    """CPU lists as ranges: [0, 1, 2, 3, 8] -> "0-3, 8"."""
    out, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            out.append(f"{start}-{v}" if v != start else f"{v}")
            start = None
    return ", ".join(out)


def span(times: pd.Series) -> str:
    t = pd.to_datetime(times.dropna())
    return "" if t.empty else f"{t.min():%Y-%m-%d %H:%M} to {t.max():%Y-%m-%d %H:%M} UTC"


def duration(seconds: float) -> str:
    return (f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min" if seconds < 5400
            else f"{seconds / 3600:.1f} h")


def took(ds: Dataset, system: str, rows: pd.DataFrame) -> str:
    """How long the system's jobs ran: their summed wall time and the span from the first start
    to the last end (file metadata), else the span of the rows' timestamps."""
    metas = [m for m in ds.file_metas(system) if m.get("started") and finite(m.get("wall_s"))]
    if not metas:
        return span(rows.measured_at)
    start = pd.to_datetime([m["started"] for m in metas], utc=True)
    end = start + pd.to_timedelta([m["wall_s"] for m in metas], unit="s")
    wall = sum(m["wall_s"] for m in metas)
    when = f"{start.min():%Y-%m-%d %H:%M} to {end.max():%H:%M} UTC" \
        if start.min().date() == end.max().date() else span(pd.Series([start.min(), end.max()]))
    jobs = f"{len(metas)} job" + ("s" if len(metas) != 1 else "")
    return (f"{jobs}, {duration(wall)} of job time; {when} "
            f"({duration((end.max() - start.min()).total_seconds())})")
