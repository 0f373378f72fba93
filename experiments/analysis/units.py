"""Numbers as a reader sees them: SI prefixes for rates and sizes, binary units for caches."""

from __future__ import annotations

import math


def si(value, unit="", digits=3) -> str:
    """4.31e12, 'B/s' -> '4.31 TB/s'; a missing or non-finite value -> 'n/a'."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    small = ((1e-3, "m"), (1e-6, "µ"), (1e-9, "n")) if unit == "s" else ()  # not "mFLOP/B"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"),
                           (1, ""), *small):
        if abs(value) >= factor:
            return f"{value / factor:.{digits}g} {prefix}{unit}".strip()
    return f"{value:.{digits}g} {unit}".strip()


def binary(nbytes) -> str:
    """Cache sizes in KiB/MiB, as vendors state them."""
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= f:
            return f"{nbytes / f:.3g} {unit}"
    return f"{nbytes:.0f} B"


def finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
