"""The cores' clock as the cores count it: a chain of dependent one-cycle integer ops (shift, xor,
add: each waits on the one before, one cycle each on every x86 and Arm core since the 1990s) run
on every worker of a team at once, its ops over its time.

Why: a VM without APERF/MPERF reads /proc/cpuinfo's fixed nominal clock, and the silicon's peak
(core/cpu_peak.py, analysis/silicon.py) at that clock says nothing of the cores' turbo. The
chain runs right after a point on the cores that ran it, all of them loaded, as they were. It
runs scalar, so an FMA unit's own lower clock (Intel's AVX-512 licence) reads as this one: the
peak it gives is an upper bound, the fraction a lower one. A worker kept off its core reads a
slower clock, never a faster one: each worker keeps its fastest of ROUNDS.

The FMA units' own clock (fma_mhz): Intel lowers the clock for dense AVX-512 FMAs (its licence),
which a scalar chain never sees. So the intensity experiment's FMA chain (kernels/cpu_fma_ir.py)
in the point's dtype runs again with an integer chain in each step, 1.5x as many one-cycle ops
as the step's FMAs need cycles at full rate: the integer chain sets the pace while the FMAs fill
two thirds of the pipes, and its ops over its time is the clock the cores kept under dense FMAs.
"""

from __future__ import annotations

import functools
import math
import statistics
import time

import numpy as np

from experiments.kernels.numba_host import njit

OPS = 3  # per iteration: the shift, the xor and the add, each on the last one's result
ITERATIONS = 300_000  # ~0.25 ms at 3.5 GHz: long beside the timer, short beside a point
ROUNDS = 4
FMAS = 1024  # steps a block of the FMA units' clock chain takes
CYCLES = 1_000_000  # of that chain a round: ~0.3 ms at 3.5 GHz
TICKS_OVER = 1.5  # its integer ops a step over the cycles the step's FMAs need at full rate


@njit(nogil=True)
def _chain(x, n):
    for _ in range(n):
        x = (x ^ (x >> 1)) + 12345
    return x


_chain(1, 1)  # compiled at import, not inside a point's time


def after_point(ctx, cpus=None) -> dict:
    """The clocks the cores of a CPU job's team (or of `cpus`, the point's own) count right
    after a point, as params: `core_mhz` (team_mhz) and `fma_mhz` (where this CPU's FMA pipes
    are known)."""
    from experiments.kernels.cpu_team import job_cpus, team

    crew = team(cpus or job_cpus(ctx))
    return {"core_mhz": team_mhz(crew), "fma_mhz": fma_mhz(crew, fma_per_cycle(), ctx.dtype)}


@functools.cache
def fma_per_cycle() -> float | None:
    """Vector FMAs a core of this host starts a cycle at the kernels' width (core/cpu_peak.py's
    table); None where the table lacks it."""
    from experiments.core import cpu_peak
    from experiments.kernels.numba_host import vector_bits

    cpu = cpu_peak.cpu_identity() or {}
    uarch, _ = cpu_peak.microarchitecture(cpu)
    ports, bits = cpu_peak.fma_units(uarch, cpu) if uarch else (None, 0)
    if not (ports and bits):
        return None
    return ports * min(1.0, bits / vector_bits())


def tick_ops(per_cycle: float, vectors: int) -> int:
    """Integer ops a step of the FMA units' clock chain takes beside its `vectors` FMAs."""
    return math.ceil(TICKS_OVER * vectors / per_cycle)


@functools.cache  # per process: every CPU point asks for it
def fma_kernel(per_cycle: float | None, dtype: str = "float32") -> tuple | None:
    """(the compiled clock chain, its lanes, its integer ops a step, its element type) for the
    point's dtype (float32's for a dtype with no FMA kernel here); None without the pipes'
    rate."""
    from experiments.kernels import cpu_fma_ir

    if not per_cycle:
        return None
    half = dtype == "float16" and cpu_fma_ir.native()
    element = np.dtype(np.float16 if half else np.float64 if dtype == "float64" else np.float32)
    ticks = tick_ops(per_cycle, cpu_fma_ir.shape()[1])
    fn, lanes = cpu_fma_ir.kernel(cpu_fma_ir.BY_DTYPE[element], ticks)
    return fn, lanes, ticks, element


def fma_mhz(team, per_cycle: float | None, dtype: str = "float32") -> float | None:
    """The median over a team's workers of each one's fastest run of the FMA units' clock chain
    (MHz), run on all at once; None without the pipes' rate."""
    if not (found := fma_kernel(per_cycle, dtype)):
        return None
    fn, lanes, ticks, element = found  # the fork server compiles it (sweep/warm.py)
    blocks = max(1, round(CYCLES / (FMAS * ticks)))
    x = np.random.default_rng(0).uniform(0.5, 1.5, blocks * lanes).astype(element)
    ys = [np.empty_like(x) for _ in team.cpus]
    ends = [np.zeros(1, np.int64) for _ in team.cpus]
    return _median_fastest(team, lambda i: fn(x.ctypes.data, ys[i].ctypes.data, 0, x.size, FMAS,
                                              0.75, ends[i].ctypes.data), blocks * FMAS * ticks)


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
