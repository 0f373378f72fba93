"""Each CPU FMA and GEMM ceiling against the silicon's peak (core/cpu_peak.py), at the clock its
plateau's points recorded (the cores' counted cycles where the kernel has them, else the clock
the FMA units, or else the cores, counted after each FMA or GEMM point, kernels/cpu_clock.py,
else the system's): a repeat on a slower clock gets a lower peak, not a lower fraction. An FMA
ceiling of several CPUs is set beside the chain on one of them (its share of one core's peak, and
how the team scales a cycle: CPUs that share FMA units are named, not counted as cores' worth)."""

from __future__ import annotations

import math

from experiments.analysis.units import finite
from experiments.core.cpu_peak import peak
from experiments.core.cpu_time import CLOCK_SOURCES

# the ceilings table's columns this adds (null on a GPU, and on files without a CPU identity)
COLUMNS = ("cpu_freq_mhz", "physical_peak", "of_physical_peak", "peak_basis", "one_cpu_of_peak",
           "fma_scaling")
MATRIX = {"vector_flops": False, "matrix_flops": True}  # ceiling -> a GEMM's
# All N CPUs below this times N times one CPU's FMA rate a cycle: they share FMA units. Separate
# cores running a compute-bound chain on their own registers scale near 1; two CPUs on one
# core's pipes scale 0.5
SHARED = 0.75


def counted(cpu: dict) -> bool:
    """Whether the rows' clock is the cores' counted cycles (core/cpu_time.CLOCK_SOURCES), not a
    driver's request or the kernel's fixed estimate (a VM without APERF/MPERF)."""
    source = cpu.get("clock_source")
    return bool(CLOCK_SOURCES.get(source)) or (
        source in CLOCK_SOURCES and "aperfmperf" in (cpu.get("flags") or ()))


CHAIN_NOTE = ("clock: counted by the cores, a chain of dependent one-cycle integer ops on every "
              "core of the job's team after each point (kernels/cpu_clock.py: scalar, so an "
              "upper bound on the FMA units' clock)")
FMA_NOTE = ("clock: the FMA units', a chain of one-cycle integer ops stepped beside vector FMAs "
            "in the point's dtype (two thirds of the pipes' rate, dense enough for Intel's "
            "AVX-512 licence) on every core of the job's team after each point "
            "(kernels/cpu_clock.py)")


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
        mhz, note = clock(r, cpu)
        n = r.get("cores") or cores
        p = peak(cpu, n, mhz, r["dtype"], MATRIX[r["ceiling"]])
        share = r["value"] / p.flops if finite(p.flops) else math.nan
        basis = p.basis + ("; " + note if finite(p.flops) else "")
        if share > 1:  # the table's ports and lanes hold: the cores ran faster than recorded
            basis += (f"; above 100 %: the cores ran at {share * mhz / 1000:.2f} GHz or more, "
                      "not the recorded clock")
        r = r | {"cpu_freq_mhz": mhz, "physical_peak": p.flops, "of_physical_peak": share,
                 "peak_basis": basis}
        out.append(r | alone(r, cpu, n))
    return out


def clock(r: dict, cpu: dict, prefix: str = "") -> tuple[float, str]:
    """(MHz, its note) a ceiling's peak reads (module docstring); `prefix` "one_cpu_": the
    clocks of its one-CPU point."""
    mhz, note = r.get(prefix + "cpu_freq_mhz"), clock_note(cpu)
    if not counted(cpu) and finite(r.get(prefix + "fma_mhz")):  # the FMA units' count, after
        mhz, note = r[prefix + "fma_mhz"], FMA_NOTE
        if finite(r.get(prefix + "core_mhz")):
            note += f"; the scalar chain read {r[prefix + 'core_mhz'] / 1000:.2f} GHz"
    elif not counted(cpu) and finite(r.get(prefix + "core_mhz")):  # the cores' count, after
        mhz, note = r[prefix + "core_mhz"], CHAIN_NOTE
    return mhz, note


def alone(r: dict, cpu: dict, n: int) -> dict:
    """An FMA ceiling of n > 1 CPUs beside its one-CPU point (roofline.one_cpu): that point's
    share of one core's peak, the team's FLOPs a cycle over n times one CPU's (fma_scaling),
    and, below SHARED, why no kernel reaches the n cores' peak here. {} without the point."""
    if not n or n < 2 or not finite(r.get("one_cpu")):
        return {}
    team_mhz, mhz = r.get("cpu_freq_mhz"), clock(r, cpu, "one_cpu_")[0]
    mhz = mhz if finite(mhz) else team_mhz
    clocked = finite(mhz) and finite(team_mhz)  # else: per second, the clocks unknown
    single = peak(cpu, 1, mhz, r["dtype"], False).flops
    scaling = r["value"] / (n * r["one_cpu"]) * (mhz / team_mhz if clocked else 1.0)
    of_one = f", {r['one_cpu'] / single:.0%} of one core's peak" if finite(single) else ""
    if finite(single) and r["one_cpu"] > single:  # one point's clock, counted after it
        of_one += f" (so it ran at {r['one_cpu'] / single * mhz / 1000:.2f} GHz or more)"
    basis = (f"; one CPU alone: {r['one_cpu'] / 1e9:.3g} GFLOP/s"
             + (f" at {mhz / 1000:.2f} GHz" if finite(mhz) else "")
             + f"{of_one}; all {n} reach {scaling:.2f}x {n} times that a "
             + ("cycle" if clocked else "second"))
    if scaling < SHARED:
        basis += (f": these {n} CPUs share FMA units (SMT siblings the system does not show, "
                  f"or another tenant's work on the same cores), so no kernel reaches {n} "
                  "cores' peak here")
    return {"one_cpu_of_peak": r["one_cpu"] / single, "fma_scaling": scaling,
            "peak_basis": r["peak_basis"] + basis}


def shared_scaling(scalings) -> float | None:
    """The least of a system's FMA scalings (one per dtype) where it is below SHARED: its cores
    were shared in this run; else None."""
    s = min((float(x) for x in scalings if finite(x)), default=math.nan)
    return s if s < SHARED else None


def shared_host(rows: list[dict]) -> list[dict]:
    """The rows, each interval widened each way by the least FMA scaling below SHARED: another
    tenant took up to that share of the team's cores in this run and may take none, or more, in
    the next, so a repeat moves that much further than on a quiet host (plateaus.RUN_TO_RUN)."""
    s = shared_scaling(r.get("fma_scaling") for r in rows)
    if s is None:
        return rows
    why = (f"interval widened {1 / s:.2f}x each way: another tenant shares these cores (the "
           f"FMA team at {s:.2f}x its CPUs alone)")
    return [r | {"ci_low": r["ci_low"] * s, "ci_high": r["ci_high"] / s,
                 "note": "; ".join(n for n in (r.get("note"), why) if n)}
            if finite(r.get("ci_low")) and finite(r.get("ci_high")) else r for r in rows]


def shared_cpus(ceilings) -> list[str]:
    """One line per CPU whose FMA team scaled below SHARED in this run (the ceilings' fma_scaling,
    the least of its dtypes): its ceilings are this moment's, their intervals widened by it
    (shared_host), and the summary says so first, as it does of a shared GPU."""
    if "fma_scaling" not in ceilings:
        return []
    out = []
    for _, g in ceilings[ceilings.device_kind == "cpu"].groupby("system", sort=False):
        if (s := shared_scaling(g.fma_scaling)) is not None:
            out.append(f"shared CPU: {g.device_name.iloc[0]} ({g.device.iloc[0]} @ "
                       f"{g.host.iloc[0]}) ran its FMA team at {s:.2f}x its CPUs alone: "
                       "another tenant's work on the same cores, or SMT siblings the system does "
                       f"not show; its ceilings are this run's, their intervals widened "
                       f"{1 / s:.2f}x each way")
    return out
