"""Reference devices from config/datasheets.yaml: every number with its source, in SI units."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

ARTICLE_DEVICE = "NVIDIA GeForce RTX 3090"  # the device of the article's worked numbers
SCALE = {"memory_GB": 1e9, "bandwidth_GBps": 1e9, "host_link_GBps": 1e9, "power_W": 1.0,
         "vector_TFLOPS": 1e12, "matrix_TFLOPS": 1e12}


@dataclass
class Datasheet:
    name: str
    kind: str
    match: list[str]
    memory_bytes: float | None = None
    bandwidth_Bps: float | None = None
    host_link_Bps: float | None = None
    power_W: float | None = None  # the board's power limit (max TDP)
    vector: dict = field(default_factory=dict)  # dtype -> FLOP/s
    matrix: dict = field(default_factory=dict)
    cite: dict = field(default_factory=dict)  # "bandwidth", "matrix:bfloat16" ... -> source text

    def matches(self, device_name: str | None) -> bool:
        return bool(device_name) and any(re.search(p, device_name, re.I) for p in self.match)

    def peak(self, unit: str, dtype: str) -> float | None:
        """Compute peak for a ceiling: the matrix rate of dtype, else its vector rate (a float32
        GEMM without TF32 runs on the vector units)."""
        if unit == "matrix":
            return self.matrix.get(dtype) or self.vector.get(dtype)
        return self.vector.get(dtype)

    def ridge(self, unit: str, dtype: str) -> float | None:
        peak = self.peak(unit, dtype)
        return peak / self.bandwidth_Bps if peak and self.bandwidth_Bps else None


def _number(entry, key, sources, where):
    if not isinstance(entry, dict) or "value" not in entry or "source" not in entry:
        raise ValueError(f"{where}: {key} needs {{value: ..., source: ...}}, got {entry!r}")
    if entry["source"] not in sources:
        raise ValueError(f"{where}: {key} cites unknown source {entry['source']!r}; "
                         f"known: {sorted(sources)}")
    text = sources[entry["source"]] + (f" ({entry['note']})" if entry.get("note") else "")
    return float(entry["value"]), text


def load(path: str | Path) -> list[Datasheet]:
    """Parse the datasheet file; a number without a known source is an error naming it."""
    # libyaml's loader where PyYAML has it: the pure-Python one took 30 ms a read
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    doc = yaml.load(Path(path).read_text(), Loader=loader) or {}
    sources = doc.get("sources", {})
    sheets = []
    for dev in doc.get("devices", []):
        where = f"{path}: {dev.get('name', '?')}"
        sheet = Datasheet(name=dev["name"], kind=dev.get("kind", "cuda"), match=dev["match"])
        for key, attr in (("memory_GB", "memory_bytes"), ("bandwidth_GBps", "bandwidth_Bps"),
                          ("host_link_GBps", "host_link_Bps"), ("power_W", "power_W")):
            if key in dev:
                value, text = _number(dev[key], key, sources, where)
                setattr(sheet, attr, value * SCALE[key])
                sheet.cite[attr] = text
        for key, unit in (("vector_TFLOPS", "vector"), ("matrix_TFLOPS", "matrix")):
            for dtype, entry in (dev.get(key) or {}).items():
                value, text = _number(entry, f"{key}.{dtype}", sources, where)
                getattr(sheet, unit)[dtype] = value * SCALE[key]
                sheet.cite[f"{unit}:{dtype}"] = text
        sheets.append(sheet)
    return sheets


def find(sheets: list[Datasheet], device_name: str | None) -> Datasheet | None:
    """The datasheet whose pattern matches a measured device name (first match)."""
    return next((s for s in sheets if s.matches(device_name)), None)


def by_name(sheets: list[Datasheet], name: str) -> Datasheet | None:
    return next((s for s in sheets if s.name == name), None)


def table(sheets: list[Datasheet]) -> pd.DataFrame:
    """One row per number: device, quantity, dtype, value, unit, source (the report's table)."""
    rows = []
    for s in sheets:
        for attr, unit in (("memory_bytes", "B"), ("bandwidth_Bps", "B/s"),
                           ("host_link_Bps", "B/s")):
            if getattr(s, attr) is not None:
                rows.append((s.name, attr, None, getattr(s, attr), unit, s.cite[attr]))
        for kind in ("vector", "matrix"):
            for dtype, value in getattr(s, kind).items():
                rows.append((s.name, f"{kind}_flops", dtype, value, "FLOP/s",
                             s.cite[f"{kind}:{dtype}"]))
    return pd.DataFrame(rows, columns=["device", "quantity", "dtype", "value", "unit", "source"])
