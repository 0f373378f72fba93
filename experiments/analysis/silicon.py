"""Each CPU FMA and GEMM ceiling against the silicon's peak (core/cpu_peak.py), at the clock its
plateau's points recorded (the cores' counted cycles where the kernel has them, else the clock
the FMA units, or else the cores, counted after each FMA or GEMM point, kernels/cpu_clock.py,
else the system's): a repeat on a slower clock gets a lower peak, not a lower fraction."""

from __future__ import annotations

import math

from experiments.analysis.units import finite
from experiments.core.cpu_peak import peak
from experiments.core.cpu_time import CLOCK_SOURCES

# the ceilings table's columns this adds (null on a GPU, and on files without a CPU identity)
COLUMNS = ("cpu_freq_mhz", "physical_peak", "of_physical_peak", "peak_basis")
MATRIX = {"vector_flops": False, "matrix_flops": True}  # ceiling -> a GEMM's


def counted(cpu: dict) -> bool:
    """Whether the rows' clock is the cores' counted cycles (core/cpu_time.CLOCK_SOURCES), not a
    driver's request or the kernel's fixed estimate (a VM without APERF/MPERF)."""
    source = cpu.get("clock_source")
    return bool(CLOCK_SOURCES.get(source)) or (
        source in CLOCK_SOURCES and "aperfmperf" in (cpu.get("flags") or ()))


CHAIN_NOTE = ("clock: counted by the cores, a chain of dependent one-cycle integer ops on every "
              "core of the job's team after each point (kernels/cpu_clock.py: scalar, so an "
              "upper bound on the FMA units' clock)")
FMA_NOTE = ("clock: the FMA units', a chain of vector FMAs each waiting on the one before (the "
            "table's latency a step) on every core of the job's team after each point "
            "(kernels/cpu_clock.py: at half the point's FMA density, so an upper bound)")


def clock_note(cpu: dict) -> str:
    source = cpu.get("clock_source")
    if source is None:
        return "clock: no source recorded"
    return f"clock: {source}, " + ("the cores' counted cycles" if counted(cpu) else
                                   "not the cores' counted cycles (no APERF/MPERF here)")


def with_physical_peak(rows: list[dict], facts: dict) -> list[dict]:
    """The rows, each fitted CPU FMA and GEMM ceiling with its peak, the fraction of it and
    their basis (the product, or why there is no peak)."""
    cpu = (facts.get("extra") or {}).get("cpu") if facts.get("kind") == "cpu" else None
    if not cpu:
        return rows
    cores = ((facts.get("extra") or {}).get("placement") or {}).get("cores")
    out = []
    for r in rows:
        if r["ceiling"] not in MATRIX or not finite(r["value"]):
            out.append(r)
            continue
        mhz, note = r.get("cpu_freq_mhz"), clock_note(cpu)
        if not counted(cpu) and finite(r.get("fma_mhz")):  # the FMA units' count, after
            mhz, note = r["fma_mhz"], FMA_NOTE
            if finite(r.get("core_mhz")):
                note += f"; the scalar chain read {r['core_mhz'] / 1000:.2f} GHz"
        elif not counted(cpu) and finite(r.get("core_mhz")):  # the cores' own count, after
            mhz, note = r["core_mhz"], CHAIN_NOTE
        p = peak(cpu, r.get("cores") or cores, mhz, r["dtype"], MATRIX[r["ceiling"]])
        share = r["value"] / p.flops if finite(p.flops) else math.nan
        basis = p.basis + ("; " + note if finite(p.flops) else "")
        if share > 1:  # the table's ports and lanes hold: the cores ran faster than recorded
            basis += (f"; above 100 %: the cores ran at {share * mhz / 1000:.2f} GHz or more, "
                      "not the recorded clock")
        out.append(r | {"cpu_freq_mhz": mhz, "physical_peak": p.flops,
                        "of_physical_peak": share, "peak_basis": basis})
    return out
