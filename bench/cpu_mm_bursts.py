"""Is a CPU's GEMM rate bursty? rooflab's matmul job (the sweep's CPU settings) and torch.mm (out
of place and with out=) at SIZES, alternated for R rounds (env R, default 7; bfloat16 at 1024,
2048 and 4096: about 13 s a round on the H200 node), each torch.mm form at least 1 s and 3 calls
a size, every call's time kept in $OUT/mmdiag.json. DTYPE (default bfloat16) and SIZES (default
1024,2048,4096) come from the environment. On the node both read 4.4-5.7 TFLOP/s in bfloat16,
then bursts of 9-14 for seconds (docs/benchmarks.md, "Both machines at 2f9ff81 and a826ce6").

    OUT=/tmp/bursts [R=7 DTYPE=float16 SIZES=2048,4096,8192] python bench/cpu_mm_bursts.py
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.cpu_peers import _rooflab_job, mm_call_times  # noqa: E402

SIZES = tuple(int(n) for n in os.environ.get("SIZES", "1024,2048,4096").split(","))
DTYPE = os.environ.get("DTYPE", "bfloat16")
if not isinstance(getattr(torch, DTYPE, None), torch.dtype):  # before any job runs
    sys.exit(f"DTYPE={DTYPE}: not a torch dtype (float32, bfloat16, float16)")


def _stat() -> list[int]:
    """/proc/stat's CPU line: user, nice, system, idle, iowait, irq, softirq, steal, ..."""
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def _call_times(n: int, out: bool) -> list[float]:
    """Each call's seconds of torch.mm on one DTYPE pair (into a third where `out`)."""
    dt = getattr(torch, DTYPE)
    a, b = torch.randn(n, n).to(dt), torch.randn(n, n).to(dt)
    return mm_call_times(a, b, torch.empty(n, n, dtype=dt) if out else None)


def main() -> None:
    out = Path(os.environ["OUT"])
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    print("threads", torch.get_num_threads(), DTYPE, SIZES, flush=True)
    rounds = []
    for k in range(int(os.environ.get("R", 7))):
        before, start = _stat(), time.time()
        ok = _rooflab_job(work, f"mm{k}", "matmul", DTYPE, sizes=list(SIZES))
        job = {int(r.n): (r.flops / r.time_s_min / 1e12, r.flops / r.time_s / 1e12,
                          int(r.samples)) for r in ok.itertuples()}
        calls = {f"{n}_{'out' if o else 'new'}": (n, _call_times(n, o))
                 for n in SIZES for o in (False, True)}
        delta = [y - x for x, y in zip(before, _stat())]
        mm = {key: times for key, (_, times) in calls.items()}
        rounds.append({"k": k, "t": start, "job": job, "mm": mm, "stat_delta": delta})
        # TFLOP/s: best and median call, and the number of calls
        summary = {key: (round(2 * n**3 / min(v) / 1e12, 2),
                         round(2 * n**3 / statistics.median(v) / 1e12, 2), len(v))
                   for key, (n, v) in calls.items()}
        print(k, "job (best, median, samples)",
              {n: tuple(round(x, 2) for x in v) for n, v in job.items()}, flush=True)
        print(k, "torch.mm (best, median, calls)", summary, "steal ticks", delta[7], flush=True)
    (out / "mmdiag.json").write_text(json.dumps(rounds))


if __name__ == "__main__":
    main()
