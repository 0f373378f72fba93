"""Does each CPU the OS shows add FMA pipes? (issue 56: the CPU against its physical peak)

    PYTHONPATH=. python -P bench/cpu_cores.py [--fmas 256] [--seconds 0.5] [--dtype float32]

(-P: bench/coverage.py would shadow the coverage package numba imports.)

The FMA chain of the intensity experiment (experiments/kernels/cpu_fma_ir.py, 256 FMAs an
element: compute-bound) on teams of one CPU, of each pair (0, k) and of all CPUs, with the clocks
the cores and their FMA units counted after each (experiments/kernels/cpu_clock.py). Two CPUs
that share a core's FMA pipes (SMT siblings, or a VM's vCPUs placed on one core) run a pair at
one CPU's rate: the silicon's peak then counts that core once. Prints one line per team: its
CPUs, its FLOP/s, FLOP/s per CPU over one CPU's, the two clocks, and FLOPs per cycle per CPU at
each.

    PYTHONPATH=. python -P bench/cpu_cores.py --lanes 64,128,256

numba's float32 FMA chain (experiments/kernels/cpu_fma.py) at each LANES (the elements whose
chains a worker steps together: cpu_fma.lanes picks one) on one CPU and on all, with the vector
registers its compiled FMAs use and the clocks counted right after, then torch's float32 GEMM on
one thread and on all, each in FLOPs per counted cycle per CPU: how far the chain is from what
the cores' FMA pipes do for a GEMM.
"""

from __future__ import annotations

import argparse
import os
import re
import time

import numpy as np

from experiments.kernels import cpu_clock, cpu_fma, cpu_fma_ir, cpu_team

PER_WORKER = 1 << 18  # elements a worker (1 MiB of float32 in, 1 out): ~5 ms a call
# the FMA clock chain's pipes: the table's, or one FMA a cycle (more integer ops: still their pace)
PER_CYCLE = cpu_clock.fma_per_cycle() or 1.0


def rate(cpus: list[int], fmas: int, seconds: float, kernel=None, width: int = 0,
         dtype: str = "float32") -> float:
    """The best FLOP/s of the chain (cpu_fma_ir's, or `kernel` over slices of whole `width`s)
    over `seconds` of calls on this team."""
    n = PER_WORKER * len(cpus)
    x = np.random.default_rng(0).uniform(0.5, 1.5, n).astype(dtype)
    y = np.empty_like(x)
    if kernel is None:
        return best(lambda: cpu_fma_ir.fma_chain(cpus, x, y, fmas, 0.5), 2.0 * fmas * n, seconds)
    crew = cpu_team.team(cpus)
    parts = [(x, y, 0.5, fmas, lo, hi) for lo, hi in cpu_team.split(n, len(cpus), width)]
    return best(lambda: crew.run(kernel, parts), 2.0 * fmas * n, seconds)


def registers(kernel) -> str:
    """The vector registers the compiled kernel's FMAs name, counted (x86 asm)."""
    fmas = re.findall(r"vfmadd\w+\s+([^\n]*)", "\n".join(kernel.inspect_asm().values()))
    return " ".join(f"{r}:{sum(r in f for f in fmas)}" for r in ("zmm", "ymm", "xmm"))


def per_lanes(cpus: list[int], widths: list[int], fmas: int, seconds: float) -> None:
    import torch

    teams = {"one": [cpus[0]], f"all {len(cpus)}": cpus}
    print("lanes  team    GFLOP/s  core MHz  FMA MHz  FLOP/cycle/CPU (core, FMA)  FMA registers "
          f"(default lanes: {cpu_fma.lanes(4)})")
    for width in widths:
        kernel = cpu_fma.chain_kernel(width)
        for label, t in teams.items():
            r = rate(t, fmas, seconds, kernel, width)
            crew = cpu_team.team(t)
            mhz, fma = cpu_clock.team_mhz(crew), cpu_clock.fma_mhz(crew, PER_CYCLE)
            per = [f"{r / len(t) / (m * 1e6):.1f}" if m else "-" for m in (mhz, fma)]
            print(f"{width:5d} {label:>6} {r / 1e9:9.1f} {mhz:9.0f} {fma or 0:8.0f} "
                  f"{per[0]:>12} {per[1]:>6}  {registers(kernel)}", flush=True)
    a, b = torch.randn(4096, 4096), torch.randn(4096, 4096)
    for label, t in teams.items():
        os.sched_setaffinity(0, set(t))
        torch.set_num_threads(len(t))
        r = best(lambda: a @ b, 2.0 * 4096 ** 3, seconds)
        mhz = cpu_clock.team_mhz(cpu_team.team(t))
        print(f"torch float32 GEMM 4096 on {label}: {r / 1e9:.1f} GFLOP/s, {mhz:.0f} MHz, "
              f"{r / len(t) / (mhz * 1e6):.1f} FLOP/cycle/CPU", flush=True)


def best(call, flops: float, seconds: float) -> float:
    """The best FLOP/s of `call` (a first call warms it) over `seconds` of calls."""
    call()
    top, began = 0.0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        t0 = time.perf_counter()
        call()
        top = max(top, flops / (time.perf_counter() - t0))
    return top


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fmas", type=int, default=256)
    p.add_argument("--seconds", type=float, default=0.5)
    p.add_argument("--lanes", help="comma-separated LANES to time on one CPU")
    p.add_argument("--dtype", default="float32", choices=("float32", "float64", "float16"))
    args = p.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if args.lanes:
        return per_lanes(cpus, [int(w) for w in args.lanes.split(",")], args.fmas,
                         args.seconds)
    teams = [[cpus[0]]] + [[cpus[0], c] for c in cpus[1:]] + ([cpus] if len(cpus) > 2 else [])
    one = None
    print(args.dtype)
    print("team  GFLOP/s  per-CPU/one  core MHz  FMA MHz  FLOP/cycle/CPU (core, FMA)")
    for t in teams:
        r = rate(t, args.fmas, args.seconds, dtype=args.dtype)
        crew = cpu_team.team(t)
        mhz, fma = cpu_clock.team_mhz(crew), cpu_clock.fma_mhz(crew, PER_CYCLE, args.dtype)
        one = one or r
        label = ",".join(map(str, t)) if len(t) <= 2 else f"all {len(t)}"
        print(f"{label:>5} {r / 1e9:8.1f} {r / len(t) / one:12.2f} {mhz:9.0f} {fma:8.0f} "
              f"{r / len(t) / (mhz * 1e6):14.1f} {r / len(t) / (fma * 1e6):5.1f}", flush=True)


if __name__ == "__main__":
    main()
