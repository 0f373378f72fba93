"""STREAM's kernels (and y = x + 1) for the CPU, compiled by numba (why numba: cpu_fma.py), run by
a team of pinned threads, one per core, each over its own contiguous slice, as STREAM's OpenMP
loops are (first touch puts each slice's pages in its worker's NUMA node). Plain loops: LLVM
vectorizes them for the host's widest SIMD. Float32 and float64 only (numba has no half
arithmetic on CPUs).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from experiments.kernels.cpu_team import split, team
from experiments.kernels.numba_host import use_widest_vectors

use_widest_vectors()  # before the first compile: kernels/numba_host.py says why

SCALAR = 3.0


@njit(nogil=True, boundscheck=False)
def _copy(a, b, out, lo, hi, reps):
    x, y = a[lo:hi], out[lo:hi]
    for _ in range(reps):
        for i in range(y.size):
            y[i] = x[i]


@njit(nogil=True, boundscheck=False)
def _add_one(a, b, out, lo, hi, reps):
    x, y = a[lo:hi], out[lo:hi]
    for _ in range(reps):
        for i in range(y.size):
            y[i] = x[i] + 1


@njit(nogil=True, boundscheck=False)
def _scale(a, b, out, lo, hi, reps):
    s = a.dtype.type(SCALAR)
    x, y = a[lo:hi], out[lo:hi]
    for _ in range(reps):
        for i in range(y.size):
            y[i] = s * x[i]


@njit(nogil=True, boundscheck=False)
def _add(a, b, out, lo, hi, reps):
    x, z, y = a[lo:hi], b[lo:hi], out[lo:hi]
    for _ in range(reps):
        for i in range(y.size):
            y[i] = x[i] + z[i]


@njit(nogil=True, fastmath={"contract"}, boundscheck=False)
def _triad(a, b, out, lo, hi, reps):
    s = a.dtype.type(SCALAR)
    x, z, y = a[lo:hi], b[lo:hi], out[lo:hi]
    for _ in range(reps):
        for i in range(y.size):
            y[i] = x[i] + s * z[i]


KERNELS = {"copy": _copy, "add_one": _add_one, "scale": _scale, "add": _add, "triad": _triad}


def run(cpus, op: str, a, b, out, reps: int = 1) -> None:
    """out = op(a, b), `reps` times over, by the team of `cpus` (b unused by one-input ops: pass
    a). Repeating inside the workers lets a slice that fits in L1 be timed past the team's
    start-up (tens of microseconds)."""
    parts = split(out.size, len(cpus), 64)
    team(cpus).run(KERNELS[op], [(a, b, out, lo, hi, reps) for lo, hi in parts])


@njit(nogil=True, boundscheck=False)
def _fill(x, lo, hi, seed):
    """Nonzero, non-repeating values in [0.5, 1.5): cheap to draw for gigabyte arrays."""
    state = np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(lo)
    y = x[lo:hi]
    for i in range(y.size):
        state = state * np.uint64(6364136223846793005) + np.uint64(1442695040888963407)
        y[i] = 0.5 + (state >> np.uint64(11)) * (1.0 / 9007199254740992.0)


def fill(cpus, x, seed: int = 0) -> None:
    """Fill x with `_fill` values, each worker its own slice (first touch: pages in its node)."""
    parts = split(x.size, len(cpus), 4096)
    team(cpus).run(_fill, [(x, lo, hi, seed + k) for k, (lo, hi) in enumerate(parts)])


FILL_CHUNK = 1 << 24  # half dtypes: elements drawn in float32 at a time, then converted


PAGE = 4096


def host_empty(n: int, dtype):
    """An uninitialised 1-D CPU tensor of n elements, page-aligned, in memory numpy allocates.
    numpy asks the kernel to back large arrays with huge pages (madvise MADV_HUGEPAGE: the
    default of transparent huge pages is 'madvise'); torch's allocator does not, and a stream
    over 4 KiB pages pays a TLB miss per page. On the 2-core VM numba's add read 26-29 GB/s on
    torch's memory and 33 on numpy's; torch's own add 32.5 and 34. numpy's 16-byte offset from
    the page would split every 64-byte vector over two cache lines: the tensor starts on a page."""
    import torch

    size = torch.empty(0, dtype=dtype).element_size()
    raw = np.empty(n * size + PAGE, np.uint8)
    skip = -raw.ctypes.data % PAGE
    return torch.from_numpy(raw[skip:skip + n * size]).view(dtype)


def filled(cpus, n: int, dtype, seed: int):
    """A torch CPU tensor of n `fill` values in dtype, drawn by the team (half dtypes in float32
    chunks, converted: numba has no half type). torch.randn with a generator draws on one thread:
    50 s of a node's two half-dtype bandwidth jobs."""
    import torch

    t = host_empty(n, dtype)
    if dtype in (torch.float32, torch.float64):
        fill(cpus, t.numpy(), seed=seed)
        return t
    scratch = torch.empty(min(n, FILL_CHUNK), dtype=torch.float32)
    for lo in range(0, n, FILL_CHUNK):
        part = scratch[:min(FILL_CHUNK, n - lo)]
        fill(cpus, part.numpy(), seed=seed * 1_000_003 + lo)
        t[lo:lo + part.numel()] = part
    return t
