"""Does each CPU the OS shows add FMA pipes? (issue 56: the CPU against its physical peak)

    PYTHONPATH=. python -P bench/cpu_cores.py [--fmas 256] [--seconds 0.5]

(-P: bench/coverage.py would shadow the coverage package numba imports.)

The FMA chain of the intensity experiment (experiments/kernels/cpu_fma.py, float32, cache-
resident: 64 KiB a worker) on teams of one CPU, of each pair (0, k) and of all CPUs, with the
clock the cores counted after each (experiments/kernels/cpu_clock.py). Two CPUs that share a
core's FMA pipes (SMT siblings, or a VM's vCPUs placed on one core) run a pair at one CPU's
rate: the silicon's peak then counts that core once. Prints one line per team: its CPUs, its
FLOP/s, FLOP/s per CPU over one CPU's, the counted clock, and FLOPs per cycle per CPU.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from experiments.kernels import cpu_clock, cpu_fma, cpu_team

PER_WORKER = 16384  # float32s: 64 KiB in, 64 KiB out, in L2 everywhere


def rate(cpus: list[int], fmas: int, seconds: float) -> float:
    """The best FLOP/s of the chain over `seconds` of calls on this team."""
    n = PER_WORKER * len(cpus)
    x = np.random.default_rng(0).uniform(0.5, 1.5, n).astype(np.float32)
    y = np.empty_like(x)
    cpu_fma.fma_chain(cpus, x, y, fmas, 0.5)  # compile, first-touch
    best, began = 0.0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        t0 = time.perf_counter()
        cpu_fma.fma_chain(cpus, x, y, fmas, 0.5)
        best = max(best, 2.0 * fmas * n / (time.perf_counter() - t0))
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fmas", type=int, default=256)
    p.add_argument("--seconds", type=float, default=0.5)
    args = p.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    teams = [[cpus[0]]] + [[cpus[0], c] for c in cpus[1:]] + ([cpus] if len(cpus) > 2 else [])
    one = None
    print("team  GFLOP/s  per-CPU/one  core MHz  FLOP/cycle/CPU")
    for t in teams:
        r = rate(t, args.fmas, args.seconds)
        mhz = cpu_clock.team_mhz(cpu_team.team(t))
        one = one or r
        label = ",".join(map(str, t)) if len(t) <= 2 else f"all {len(t)}"
        print(f"{label:>5} {r / 1e9:8.1f} {r / len(t) / one:12.2f} {mhz:9.0f} "
              f"{r / len(t) / (mhz * 1e6):14.1f}", flush=True)


if __name__ == "__main__":
    main()
