"""Where rooflab's CPU ceilings and the peers part ways, measured in one process on one machine:
the numba triad on STREAM's own array size (torch vs numpy allocations, float64 and float32,
best and median of 15 calls), the numba FMA chain (GFLOP/s at 256 and 1024 FMAs per element),
and torch.mm with the same operands every call (the peers' way) and with rotated operand sets
(rooflab's). Writes OUT/gaps.json.   python bench/cpu_gaps.py OUT
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.core.cpus import read_topology  # noqa: E402
from experiments.kernels import cpu_fma, cpu_stream  # noqa: E402
from experiments.kernels.numba_host import target_features, vector_bits  # noqa: E402


def timed(fn, calls=15):
    fn()
    t = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return min(t), float(np.median(t))


def main(out: Path) -> None:
    team = read_topology().team()
    res = {"team": team, "vector_bits": vector_bits(target_features()),
           "thp": Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()}
    n64 = 314572800  # STREAM's array (8x a 300 MiB LLC), float64
    for name, dt, n in (("f64", np.float64, n64), ("f32", np.float32, 2 * n64)):
        for alloc in ("torch", "numpy"):
            mk = ((lambda: torch.empty(n, dtype=getattr(torch, np.dtype(dt).name)).numpy())
                  if alloc == "torch" else (lambda: np.empty(n, dtype=dt)))
            a, b, c = mk(), mk(), mk()
            for k, x in enumerate((a, b, c)):
                cpu_stream.fill(team, x, seed=k)
            for op, arrays in (("triad", 3), ("copy", 2)):
                best, med = timed(lambda: cpu_stream.run(team, op, a, b, c), 12)
                res[f"{op}_{name}_{alloc}"] = {"best_GBs": arrays * a.nbytes / best / 1e9,
                                              "median_GBs": arrays * a.nbytes / med / 1e9}
            del a, b, c
    for dt in (np.float32, np.float64):
        x = np.empty(1 << 24, dtype=dt)
        cpu_stream.fill(team, x, seed=5)
        y = np.empty_like(x)
        for fmas in (256, 1024):
            best, med = timed(lambda: cpu_fma.fma_chain(team, x, y, fmas, 0.999), 7)
            res[f"fma_{np.dtype(dt).name}_{fmas}"] = {"best_GF": 2 * fmas * x.size / best / 1e9,
                                                      "median_GF": 2 * fmas * x.size / med / 1e9}
    res["torch_threads"] = torch.get_num_threads()
    for name in ("float32", "bfloat16", "float16"):
        dt = getattr(torch, name)
        for n in (2048, 4096, 8192):
            sets = [(torch.rand(n, n).to(dt) + 0.5, torch.rand(n, n).to(dt) + 0.5)
                    for _ in range(3 if n < 8192 else 2)]
            a, b = sets[0]
            calls = 3 if n == 8192 else 8
            best, med = timed(lambda: torch.mm(a, b), calls)
            it = iter(range(10**9))
            rbest, rmed = timed(lambda: torch.mm(*sets[next(it) % len(sets)]), calls)
            f = 2 * n ** 3 / 1e12
            res[f"mm_{name}_{n}"] = {"hot_best_TF": f / best, "hot_median_TF": f / med,
                                     "rotated_best_TF": f / rbest, "rotated_median_TF": f / rmed}
            print(name, n, res[f"mm_{name}_{n}"], flush=True)
            if med > 3:
                break
    out.mkdir(parents=True, exist_ok=True)
    (out / "gaps.json").write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
