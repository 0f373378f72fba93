"""The cores' clock as the cores count it: a chain of dependent one-cycle integer ops (shift, xor,
add: each waits on the one before, one cycle each on every x86 and Arm core since the 1990s) run
on every worker of a team at once, its ops over its time.

Why: a VM without APERF/MPERF reads /proc/cpuinfo's fixed nominal clock, and the silicon's peak
(core/cpu_peak.py, analysis/silicon.py) at that clock says nothing of the cores' turbo. The
chain runs right after a point on the cores that ran it, all of them loaded, as they were. It
runs scalar, so an FMA unit's own lower clock (Intel's AVX-512 licence) reads as this one: the
peak it gives is an upper bound, the fraction a lower one. A worker kept off its core reads a
slower clock, never a faster one: each worker keeps its fastest of ROUNDS.

The FMA units' own clock (fma_mhz): the FMA chain of kernels/cpu_fma.py with few enough chains a
step that each FMA waits on the one before (latency, not the pipes, sets the pace: half the
chains that would fill them), run the same way. Each step then takes the microarchitecture's
FMA latency in cycles (core/cpu_peak.py's table). It runs vector FMAs at the point's width, so
a clock that Intel lowers for dense AVX-512 reads lower here than the scalar chain; still at
half the point's density, so again an upper bound.
"""

from __future__ import annotations

import functools
import statistics
import time

import numpy as np

from experiments.kernels.numba_host import njit

OPS = 3  # per iteration: the shift, the xor and the add, each on the last one's result
ITERATIONS = 300_000  # ~0.25 ms at 3.5 GHz: long beside the timer, short beside a point
ROUNDS = 4
FMAS = 1024  # a chain's FMAs; a worker steps STEPS groups of them: ~0.25 ms at 4 cycles each
STEPS = 192


@njit(nogil=True)
def _chain(x, n):
    for _ in range(n):
        x = (x ^ (x >> 1)) + 12345
    return x


_chain(1, 1)  # compiled at import, not inside a point's time


def after_point(ctx, cpus=None) -> dict:
    """The clocks the cores of a CPU job's team (or of `cpus`, the point's own) count right
    after a point, as params: `core_mhz` (team_mhz) and `fma_mhz` (where this CPU's FMA latency
    is known)."""
    from experiments.kernels.cpu_team import job_cpus, team

    crew = team(cpus or job_cpus(ctx))
    return {"core_mhz": team_mhz(crew), "fma_mhz": fma_mhz(crew, *host_fma())}


@functools.cache
def host_fma() -> tuple[int | None, float | None]:
    """(FMA latency in cycles, vector FMAs a core starts a cycle at the kernels' width) of this
    host's microarchitecture (core/cpu_peak.py); Nones where the table lacks it."""
    from experiments.core import cpu_peak
    from experiments.kernels.numba_host import vector_bits

    cpu = cpu_peak.cpu_identity() or {}
    uarch, _ = cpu_peak.microarchitecture(cpu)
    ports = uarch and cpu_peak.by_part(uarch, cpu.get("model_name") or "")
    bits = uarch and min(uarch.bits, cpu_peak.isa_bits(cpu.get("flags") or ()))
    if not (ports and bits):
        return None, None
    return uarch.latency, ports * min(1.0, bits / vector_bits())


def fma_lanes(latency: int, per_cycle: float, per_vector: int) -> int | None:
    """float32 lanes a worker steps together so that latency sets the pace: chains for half of
    what fills the pipes (latency x FMAs a cycle), at least cpu_fma.MIN_LANES (fewer, and LLVM
    leaves the step scalar); None where that many would fill them."""
    from experiments.kernels.cpu_fma import MIN_LANES

    vectors = max(-(-MIN_LANES // per_vector), int(latency * per_cycle // 2))
    return vectors * per_vector if vectors < latency * per_cycle else None


def fma_chain(latency: int | None, per_cycle: float | None) -> tuple | None:
    """(the compiled float32 chain, its lanes) of the latency-bound FMA chain for this latency
    and FMAs a cycle (host_fma's); None where there is none."""
    from experiments.kernels import cpu_fma
    from experiments.kernels.numba_host import vector_bits

    lanes = latency and per_cycle and fma_lanes(latency, per_cycle, vector_bits() // 32)
    return (cpu_fma.chain_kernel(lanes), lanes) if lanes else None


def fma_mhz(team, latency: int | None, per_cycle: float | None) -> float | None:
    """The median over a team's workers of each one's fastest latency-bound FMA chain (MHz),
    run on all at once; None without the latency or where no such chain exists here."""
    if not (found := fma_chain(latency, per_cycle)):
        return None
    kernel, lanes = found  # the fork server compiles it (sweep/warm.py)
    x = np.random.default_rng(0).uniform(0.5, 1.5, STEPS * lanes).astype(np.float32)
    ys = [np.empty_like(x) for _ in team.cpus]
    kernel(x, ys[0], 0.5, 1, 0, lanes)  # compiled before the rounds
    return _median_fastest(team, lambda i: kernel(x, ys[i], 0.5, FMAS, 0, x.size),
                           STEPS * FMAS * latency)


def team_mhz(team) -> float | None:
    """The median over a team's workers of each one's fastest chain (MHz), run on all at once."""
    return _median_fastest(team, lambda i: _chain(i + 2, ITERATIONS), OPS * ITERATIONS)


def _median_fastest(team, run, cycles: float) -> float | None:
    """The median over a team's workers of each one's fastest of ROUNDS runs of run(worker),
    all workers at once, as `cycles` over its time (MHz)."""
    fastest = [0.0] * len(team.cpus)

    def one(i: int) -> None:
        t0 = time.perf_counter_ns()
        run(i)
        took = time.perf_counter_ns() - t0
        if took > 0:
            fastest[i] = max(fastest[i], cycles / took * 1e3)

    for _ in range(ROUNDS):
        team.run(one, [(i,) for i in range(len(team.cpus))])
    seen = [f for f in fastest if f > 0]
    return statistics.median(seen) if seen else None
