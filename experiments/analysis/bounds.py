"""No physically impossible number: a call's compulsory bytes and the bandwidth it attained,
bounded by what was measured (docs/placement.md, "No impossible bandwidth").

- compulsory_bytes(): a call whose bytes counted a gather's whole table (rows measured before
  counting.count_bytes counted only the rows a gather reads: their params lack
  `gathered_tables`) has them recomputed from its ops' shapes: the table less the rows read;
- bandwidth_level(): a call's attained bandwidth above the DRAM ceiling is explained by the
  smallest cache level whose fitted window holds its bytes and whose bandwidth reaches the
  attained one (its name), else the bandwidth sweep's best kernel at that working set where it
  reached as much (the fitted ceiling is the sweep's median, not its best), else flagged ABOVE.
"""

from __future__ import annotations

import math

from experiments.analysis.prediction import ITEMSIZE, is_gather
from experiments.analysis.sweeps import at, shapes_of

# a read-only stream can beat the sweep's kernels by a few %; far above, bytes were overcounted
ABOVE = "above every bandwidth measured here (the DRAM ceiling, the sweep's kernels at this size)"


def compulsory_bytes(nbytes: float, params: dict, dtype: str) -> tuple[float, bool]:
    """(bytes, recomputed?) of a call in `dtype`: `nbytes`, less each gathered table's rows not
    read where the row counted whole tables (module docstring)."""
    itemsize = ITEMSIZE.get(dtype, 2)
    if "gathered_tables" in params or not params.get("ops"):
        return nbytes, False
    excess = 0.0
    for o in params["ops"]:
        s = shapes_of(o[1])
        if not is_gather(o[0]) or len(s) < 2 or len(s[0]) != 2:
            continue
        table = math.prod(s[0]) * itemsize
        rows = math.prod(s[1]) * s[0][1] * itemsize * max(int(o[2] or 1), 1)
        excess += max(table - rows, 0.0)
    return (nbytes - excess, True) if 0 < excess < nbytes else (nbytes, False)


def bandwidth_level(r: dict, bytes_per_call: float, attained: float) -> str | None:
    """None where `attained` B/s is within the DRAM ceiling (or nothing is known); else the
    cache level that explains it (`r`: prediction.roofs's), else ABOVE."""
    dram = r.get("DRAM")
    if not dram or not attained == attained or attained <= dram:
        return None
    for hi, name, bw in r.get("caches", ()):
        if bytes_per_call <= hi and attained <= bw:
            return name
    best = at(r.get("bandwidth"), bytes_per_call)  # the sweep's best kernel at this size
    if best and attained <= best:
        return f"DRAM, within the bandwidth sweep's best kernel at this size ({best:.3g} B/s)"
    return ABOVE
