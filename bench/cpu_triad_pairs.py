"""Is a gap between rooflab's DRAM ceiling and STREAM's triad the kernel or the moment? On a host
shared with neighbours the DRAM rate moves from second to second, so two tools timed minutes
apart differ by when they ran. This probe takes the moment out: over one set of arrays (the
sweep's DRAM arrays, made as the bandwidth experiment makes them), it alternates call by call
rooflab's triad (numba, its pinned team) with STREAM's triad loop as gcc compiles it (STREAM's
flags, an OpenMP parallel for) and, on AVX-512, that loop with streaming stores (no
write-allocate). A pair of calls runs within a fraction of a second, so the per-pair ratio reads
the kernels, and each kernel's best over the pairs reads what the machine gave it.
For comparison only, beside bench/cpu_peers.py (docs/benchmarks.md).

  python bench/cpu_triad_pairs.py OUT [--doubles N] [--pairs K] [--stream BUILD/stream]

N: doubles per array (default STREAM's size in bench/cpu_peers.py build: 8x the LLC); writes
OUT/triad_pairs.csv (every call) and OUT/triad_pairs.json (the summary), and prints the summary.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# the CPUs this process may use, before any OpenMP runtime (torch's, gcc's) pins its caller to
# one place (with OMP_PROC_BIND or OMP_PLACES set): the team and every child get them back
EVERYONE = os.sched_getaffinity(0)

SCALAR = 3.0
# STREAM's triad loop (stream.c: a[j] = b[j]+scalar*c[j] in an omp parallel for), and the same
# with 512-bit streaming stores where the compiler targets AVX-512
SOURCE = r"""
#include <omp.h>
void triad(double *restrict a, const double *restrict b, const double *restrict c, long n,
           double q) {
  #pragma omp parallel for
  for (long j = 0; j < n; j++) a[j] = b[j] + q * c[j];
}
#ifdef __AVX512F__
#include <immintrin.h>
int triad_nt(double *restrict a, const double *restrict b, const double *restrict c, long n,
             double q) {
  #pragma omp parallel for
  for (long j = 0; j < n; j += 8)
    _mm512_stream_pd(a + j, _mm512_fmadd_pd(_mm512_set1_pd(q), _mm512_loadu_pd(c + j),
                                            _mm512_loadu_pd(b + j)));
  _mm_sfence();
  return 1;
}
#else
int triad_nt(double *a, const double *b, const double *c, long n, double q) { return 0; }
#endif
"""


def compiled(work: Path) -> ctypes.CDLL:
    src, lib = work / "triad.c", work / "triad.so"
    src.write_text(SOURCE)
    subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", str(src),
                    "-o", str(lib)], check=True)
    so = ctypes.CDLL(str(lib))
    for fn in (so.triad, so.triad_nt):
        fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long, ctypes.c_double]
    return so


def stream_triad(binary: Path, threads: int) -> float:
    """STREAM's triad (bytes/s), run as bench/cpu_peers.py runs it, on every CPU this process
    had (a child takes its caller's affinity, which an OpenMP runtime may have narrowed)."""
    from bench.cpu_peers import _stream
    os.sched_setaffinity(0, EVERYONE)
    return _stream(binary.parent, threads, binary.name)["stream_triad"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--doubles", type=int, default=None)
    ap.add_argument("--pairs", type=int, default=60)
    ap.add_argument("--stream", type=Path, default=None,
                    help="STREAM's binary, run before and after")
    args = ap.parse_args()
    if args.pairs < 2 or (args.doubles is not None and args.doubles < 8 << 10):
        ap.error("--pairs: at least 2; --doubles: at least 8192")
    args.out.mkdir(parents=True, exist_ok=True)

    import numpy as np
    import pandas as pd
    import torch

    from bench.cpu_peers import _machine, _omp_env, stream_doubles
    from experiments.kernels import cpu_stream

    os.sched_setaffinity(0, EVERYONE)
    topo, llc = _machine()
    team = topo.team()
    n = args.doubles or stream_doubles(llc)
    n -= n % 8  # whole 512-bit vectors for the streaming stores
    os.environ |= _omp_env(len(team))  # gcc's kernels: one thread per core, pinned
    stream = [stream_triad(args.stream, len(team))] if args.stream else []
    a, b, c = (cpu_stream.filled(team, n, torch.float64, seed=k + 1, index=k, huge_pages=False)
               for k in range(3))
    ptr = [t.data_ptr() for t in (a, b, c)]
    idx = np.linspace(0, n - 1, 4096).astype(np.int64)
    want = b.numpy()[idx] + SCALAR * c.numpy()[idx]

    def wrong() -> float:
        """The largest relative error of a = b + 3c on a sample, against float64 numpy."""
        return float(np.max(np.abs(a.numpy()[idx] - want) / np.abs(want)))
    with tempfile.TemporaryDirectory() as work:
        so = compiled(Path(work))
        kernels = {"rooflab": lambda: cpu_stream.run(team, "triad", b.numpy(), c.numpy(),
                                                     a.numpy(), one_vector=True),  # as in DRAM
                   "gcc": lambda: so.triad(*ptr, n, SCALAR)}
        if so.triad_nt(*ptr, n, SCALAR):
            kernels["gcc_streaming"] = lambda: so.triad_nt(*ptr, n, SCALAR)
        errors = {}
        for name, fn in kernels.items():  # compile, fault in, warm; check what each computes
            a.numpy()[idx] = -1.0
            fn()
            errors[name] = wrong()
        calls = []
        names = list(kernels)
        for i in range(args.pairs):
            for name in names[i % len(names):] + names[:i % len(names)]:  # rotate the order
                t0 = time.perf_counter()
                kernels[name]()
                calls.append({"pair": i, "kernel": name, "start_s": t0,
                              "seconds": time.perf_counter() - t0})
    del a, b, c
    stream += [stream_triad(args.stream, len(team))] if args.stream else []

    df = pd.DataFrame(calls)
    df["start_s"] -= df.start_s.min()
    df["gb_per_s"] = 24 * n / df.seconds / 1e9  # STREAM's count: 24 bytes per element
    df.to_csv(args.out / "triad_pairs.csv", index=False)
    wide = df.pivot(index="pair", columns="kernel", values="gb_per_s")
    ratio = wide["rooflab"] / wide["gcc"]
    summary = {
        "doubles": n, "threads": len(team), "max_rel_error": errors,
        "stream_triad_gb_per_s": [s / 1e9 for s in stream],
        "kernels": {k: {"best": float(wide[k].max()), "median": float(wide[k].median()),
                        "min": float(wide[k].min())} for k in wide},
        "rooflab_over_gcc_per_pair": {"median": float(ratio.median()),
                                      "q10": float(ratio.quantile(0.1)),
                                      "q90": float(ratio.quantile(0.9))},
        "seconds": float(df.start_s.max() + df.seconds.iloc[-1])}
    (args.out / "triad_pairs.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    bad = {k: e for k, e in errors.items() if not e <= 1e-12}
    if bad:
        sys.exit(f"triads that computed wrong values (max relative error): {bad}")


if __name__ == "__main__":
    main()
