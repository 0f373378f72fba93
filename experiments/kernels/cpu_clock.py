"""The cores' clock as the cores count it: a chain of dependent one-cycle integer ops (shift, xor,
add: each waits on the one before, one cycle each on every x86 and Arm core since the 1990s) run
on every worker of a team at once, its ops over its time.

Why: a VM without APERF/MPERF reads /proc/cpuinfo's fixed nominal clock, and the silicon's peak
(core/cpu_peak.py, analysis/silicon.py) at that clock says nothing of the cores' turbo. The
chain runs right after a point on the cores that ran it, all of them loaded, as they were. It
runs scalar, so an FMA unit's own lower clock (Intel's AVX-512 licence) reads as this one: the
peak it gives is an upper bound, the fraction a lower one. A worker kept off its core reads a
slower clock, never a faster one: each worker keeps its fastest of ROUNDS.
"""

from __future__ import annotations

import statistics
import time

from numba import njit

OPS = 3  # per iteration: the shift, the xor and the add, each on the last one's result
ITERATIONS = 300_000  # ~0.25 ms at 3.5 GHz: long beside the timer, short beside a point
ROUNDS = 4


@njit(nogil=True)
def _chain(x, n):
    for _ in range(n):
        x = (x ^ (x >> 1)) + 12345
    return x


_chain(1, 1)  # compiled at import, not inside a point's time


def after_point(ctx) -> float | None:
    """The clock the cores of a CPU job's team count right after a point: team_mhz on them."""
    from experiments.kernels.cpu_team import job_cpus, team

    return team_mhz(team(job_cpus(ctx)))


def team_mhz(team) -> float | None:
    """The median over a team's workers of each one's fastest chain (MHz), run on all at once."""
    fastest = [0.0] * len(team.cpus)

    def one(i: int) -> None:
        t0 = time.perf_counter_ns()
        _chain(i + 2, ITERATIONS)
        took = time.perf_counter_ns() - t0
        if took > 0:
            fastest[i] = max(fastest[i], OPS * ITERATIONS / took * 1e3)

    for _ in range(ROUNDS):
        team.run(one, [(i,) for i in range(len(team.cpus))])
    seen = [f for f in fastest if f > 0]
    return statistics.median(seen) if seen else None
