"""Numbers as a person reads them, for the claims, the report, compare and the terminal: the one
formatter. SI prefixes with units ("4.31 TB/s"), intervals as "4.29 TB/s [4.27, 4.33]", cache
sizes in KiB/MiB, a device's memory in whole GiB as products are named ("H100 80GB": 80 GiB),
internal names as words. Never scientific notation, float noise, "nan" or "None": a missing or
non-finite value is MISSING, an empty string (an empty cell; prose says in words what is missing).
"""

from __future__ import annotations

import math

MISSING = ""
PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))
SMALL = ((1e-3, "m"), (1e-6, "µ"), (1e-9, "n"))  # for seconds only: not "mFLOP/B"
TINY = 1e-7  # below float32's epsilon a plain number is rounding left over (seconds: prefixes)

# internal names (ceilings, timers, facts) as a reader knows them: the one table
WORDS = {
    "dram_bw": "DRAM bandwidth", "matrix_flops": "GEMM ceiling",
    "vector_flops": "FMA (vector) ceiling", "intensity_bw": "bandwidth seen by the FMA sweep",
    "ridge_matrix": "ridge (GEMM / DRAM)", "ridge_vector": "ridge (FMA / DRAM)",
    "latency_graph": "latency floor (graph replay)",
    "latency_eager": "latency floor (eager launch)",
    "host_nosync": "host clock, no sync", "host_sync": "host clock, synchronized",
    "cuda_event": "CUDA events", "cuda_graph": "CUDA graph replay",
    "llc_bytes": "last-level cache", "cache_bytes": "caches", "memory_bytes": "memory",
    "compute_units": "compute units", "loadavg_1m": "load average (1 min)",
    "cpu_mhz_mean": "CPU clock (MHz, mean)", "sm_clock_mhz": "SM clock (MHz)",
    "memory_clock_mhz": "memory clock (MHz)", "max_clock_mhz": "max clock (MHz)",
    "power_w": "power (W)", "temperature_c": "temperature (°C)",
    "pcie_generation": "PCIe generation", "pcie_width": "PCIe lanes",
    "torch_version": "torch", "cuda_version": "CUDA", "capability": "compute capability",
}


def finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def words(name: str) -> str:
    """An internal name for readers: 'dram_bw' -> 'DRAM bandwidth', 'l2_bw' -> 'L2 bandwidth',
    'dram_bw_numa1' -> 'DRAM bandwidth, NUMA node 1'; an unknown one with its underscores as
    spaces."""
    if name in WORDS:
        return WORDS[name]
    if name.startswith("dram_bw_numa"):
        return f"DRAM bandwidth, NUMA node {name.removeprefix('dram_bw_numa')}"
    if name.endswith("_bw"):
        return name[:-3].upper() + " bandwidth"
    return name.replace("_", " ")


def num(value, digits: int = 3) -> str:
    """A plain number to `digits` significant digits: 1180 -> "1,180", 0.00302 -> "0.00302",
    0.5 -> "0.5", 10.6337890625 -> "10.6"; under TINY, "≈ 0" (3.1e-16 is float noise, not
    "0.000000000000000313"); missing or not finite -> MISSING."""
    if not finite(value):
        return MISSING
    if value == 0:
        return "0"
    if abs(value) < TINY:
        return "≈ 0"
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
    """4.31e12, "B/s" -> "4.31 TB/s"; 2.7e-5, "s" -> "27 µs"; missing -> MISSING."""
    if not finite(value):
        return MISSING
    factor, prefix = _prefix(value, unit, digits)
    return f"{num(value / factor, digits)} {prefix}{unit}".strip()


def interval(value, low, high, unit: str = "", digits: int = 3) -> str:
    """"4.29 TB/s [4.27, 4.33]": the bounds in the value's prefix; without bounds, the value."""
    if not finite(value):
        return MISSING
    if not (finite(low) and finite(high)):
        return qty(value, unit, digits)
    factor, prefix = _prefix(value, unit, digits)
    unit_text = f" {prefix}{unit}" if prefix or unit else ""
    return (f"{num(value / factor, digits)}{unit_text} "
            f"[{num(low / factor, digits)}, {num(high / factor, digits)}]")


def share(value) -> str:
    """0.14 -> "14 %"; small shares keep a digit: 0.004 -> "0.4 %"."""
    if not finite(value):
        return MISSING
    pct = 100 * value
    return f"{pct:.0f} %" if pct >= 1 or pct == 0 else f"{num(pct, 1)} %"


def ratio(value) -> str:
    """A ratio: 0.98x, 25.4x, 0.00013x -> "0.00013x"; missing -> MISSING."""
    return f"{num(value)}x" if finite(value) else MISSING


def binary(nbytes) -> str:
    """Cache sizes in KiB/MiB, as vendors state them: 32768 -> "32 KiB"."""
    if not finite(nbytes):
        return MISSING
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= f:
            return f"{num(nbytes / f)} {unit}"
    return f"{num(nbytes)} B"


def memory(nbytes) -> str:
    """A device's or host's memory as its product is named: the whole GiB it holds (an "H100 80GB"
    reports 79.6 GiB usable: "80 GiB"; a 16 GB host 15.6 GiB: "16 GiB"); under 1 GiB, binary."""
    if not finite(nbytes):
        return MISSING
    return f"{round(nbytes / 2**30):,} GiB" if nbytes >= 2**30 else binary(nbytes)


def count(n: int, noun: str, plural: str | None = None) -> str:
    """1 experiment, 2 experiments."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
