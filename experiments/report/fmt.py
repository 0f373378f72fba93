"""Numbers as a person reads them in the report, compare and the terminal: SI prefixes with units,
intervals as "4.29 TB/s [4.27, 4.33]", never scientific notation, never nan or None (empty)."""

from __future__ import annotations

import math

from experiments.analysis.units import finite

PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))
SMALL = ((1e-3, "m"), (1e-6, "µ"), (1e-9, "n"))  # for seconds only: not "mFLOP/B"


def num(value, digits: int = 3) -> str:
    """A plain number to `digits` significant digits: 1180 -> "1,180", 0.00302 -> "0.00302",
    0.5 -> "0.5"; missing or not finite -> ""."""
    if not finite(value):
        return ""
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{round(value, decimals):,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _prefix(value, unit: str, digits: int = 3) -> tuple[float, str]:
    value = float(f"{value:.{digits}g}")  # 999.7e9 rounds to 1 T, not "1,000 G"
    for factor, prefix in PREFIXES + (SMALL if unit == "s" else ()):
        if abs(value) >= factor:
            return factor, prefix
    return 1.0, ""


def qty(value, unit: str = "", digits: int = 3) -> str:
    """4.31e12, "B/s" -> "4.31 TB/s"; 2.7e-5, "s" -> "27 µs"; missing -> ""."""
    if not finite(value):
        return ""
    factor, prefix = _prefix(value, unit, digits)
    return f"{num(value / factor, digits)} {prefix}{unit}".strip()


def interval(value, low, high, unit: str = "", digits: int = 3) -> str:
    """"4.29 TB/s [4.27, 4.33]": the bounds in the value's prefix; without bounds, the value."""
    if not finite(value):
        return ""
    if not (finite(low) and finite(high)):
        return qty(value, unit, digits)
    factor, prefix = _prefix(value, unit, digits)
    unit_text = f" {prefix}{unit}" if prefix or unit else ""
    return (f"{num(value / factor, digits)}{unit_text} "
            f"[{num(low / factor, digits)}, {num(high / factor, digits)}]")


def share(value) -> str:
    """0.14 -> "14 %"; small shares keep a digit: 0.004 -> "0.4 %"."""
    if not finite(value):
        return ""
    pct = 100 * value
    return f"{pct:.0f} %" if pct >= 1 or pct == 0 else f"{num(pct, 1)} %"


def ratio(value) -> str:
    """A ratio: 0.98x, 25.4x, 0.00013x -> "0.00013x"; missing -> ""."""
    return f"{num(value)}x" if finite(value) else ""


def count(n: int, noun: str, plural: str | None = None) -> str:
    """1 experiment, 2 experiments."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
