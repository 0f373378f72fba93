"""Is there an LLC shadow past 4x the LLC on this CPU? The triad of rooflab's kernels over arrays
of a few multiples of the LLC, the sizes interleaved call by call (so a busy neighbour slows
every size alike), best and median rate per size. The DRAM ceiling of a host-clocked CPU takes
every point past 4x the LLC (analysis/levels.py past_shadow); a best rate that still falls with
size past there would say it should not.

  python bench/cpu_shadow.py OUT [ROUNDS]   # writes OUT/shadow.json, prints the table
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MULTIPLES = (0.5, 1, 2, 4, 8, 16)  # bytes per array, x the LLC the team holds


def main(out: Path, rounds: int = 20) -> None:
    import torch

    from experiments.core.cpus import read_topology
    from experiments.kernels import cpu_stream

    topo = read_topology()
    cpus = topo.team()
    llc = max(topo.cache_total(cpus).values(), default=32 << 20)
    arrays = {}
    for m in MULTIPLES:
        n = int(m * llc) // 4 // 64 * 64
        arrays[m] = [cpu_stream.filled(cpus, n, torch.float32, k + 1, k).numpy() for k in range(3)]
        cpu_stream.run(cpus, "triad", arrays[m][1], arrays[m][2], arrays[m][0])
    times = {m: [] for m in MULTIPLES}
    for _ in range(rounds):
        for m, (a, b, c) in arrays.items():
            reps = max(1, int(4 / m))  # the smallest arrays: a few passes per call
            t0 = time.perf_counter()
            cpu_stream.run(cpus, "triad", b, c, a, reps)
            times[m].append((time.perf_counter() - t0) / reps)
    rows = []
    for m, (a, _, _) in arrays.items():
        rate = 3 * a.nbytes / np.asarray(times[m])
        rows.append({"array_x_llc": m, "working_set_x_llc": 3 * m, "best": float(rate.max()),
                     "median": float(np.median(rate)), "calls": len(rate)})
    out.mkdir(parents=True, exist_ok=True)
    (out / "shadow.json").write_text(json.dumps({"llc_bytes": llc, "threads": len(cpus),
                                                 "rows": rows}, indent=1))
    print(f"triad, {len(cpus)} threads, LLC {llc / 2**20:.0f} MiB, {rounds} interleaved rounds:")
    for r in rows:
        print(f"  working set {r['working_set_x_llc']:5.1f}x LLC: best {r['best'] / 1e9:6.1f} "
              f"GB/s, median {r['median'] / 1e9:6.1f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), *(int(a) for a in sys.argv[2:3]))
