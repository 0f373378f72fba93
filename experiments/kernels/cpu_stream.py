"""STREAM's kernels (and y = x + 1) for the CPU, compiled by numba (why numba: cpu_fma.py), run by
a team of pinned threads, one per core, each over its own contiguous slice, as STREAM's OpenMP
loops are (first touch puts each slice's pages in its worker's NUMA node). Plain loops: LLVM
vectorizes them for the host's widest SIMD. Float32 and float64 only (numba has no half
arithmetic on CPUs).
"""

from __future__ import annotations

import mmap

import numpy as np

from experiments.kernels.cpu_team import split, team
from experiments.kernels.numba_host import njit

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

# LLVM's loop vectorizer steps these loops four vectors at a time (four loads of each input, four
# stores). In DRAM that can cost a CPU a tenth or more of every op against gcc's STREAM loop (one
# vector a step; docs/benchmarks.md, "One vector a step"); in caches one vector a step is slower.
# So the DRAM window's points run the kernels compiled so; points in a cache keep LLVM's step.
ONE_VECTOR = "-force-vector-interleave"  # LLVM's option: 1 forces it, 0 (default) lets LLVM pick
_ONE_VECTOR_KERNELS: dict = {}  # (op, dtype) -> its kernel compiled one vector a step


def one_vector_kernel(op: str, dtype):
    """op's kernel for run()'s arguments in `dtype` (1-D contiguous arrays, int64 bounds) with one
    vector a loop step, compiled once: a dispatcher of its own over the same Python loop,
    compiled with LLVM's option set (it is global to the process) and put back, then closed to
    further compiles (other argument types would compile at LLVM's step, unseen)."""
    key = (op, np.dtype(dtype))
    if key not in _ONE_VECTOR_KERNELS:
        import llvmlite.binding as llvm
        from numba import from_dtype, types

        plain = KERNELS[op]
        kernel = njit(**{k: v for k, v in plain.targetoptions.items() if k != "nopython"})(
            plain.py_func)
        array = types.Array(from_dtype(key[1]), 1, "C")
        llvm.set_option("", f"{ONE_VECTOR}=1")
        try:
            kernel.compile((array, array, array, types.int64, types.int64, types.int64))
        finally:
            llvm.set_option("", f"{ONE_VECTOR}=0")
        kernel.disable_compile()
        _ONE_VECTOR_KERNELS[key] = kernel
    return _ONE_VECTOR_KERNELS[key]


def run(cpus, op: str, a, b, out, reps: int = 1, one_vector: bool = False) -> None:
    """out = op(a, b), `reps` times over, by the team of `cpus` (b unused by one-input ops: pass
    a). Repeating inside the workers lets a slice that fits in L1 be timed past the team's
    start-up (tens of microseconds). one_vector: the kernel stepping one vector at a time."""
    parts = split(out.size, len(cpus), 64)
    kernel = one_vector_kernel(op, a.dtype) if one_vector else KERNELS[op]
    team(cpus).run(kernel, [(a, b, out, lo, hi, reps) for lo, hi in parts])


@njit(inline="always")
def _seeded(seed, lo):
    """The generator's state at element `lo` of a worker's slice (a 64-bit LCG)."""
    return np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(lo)


@njit(inline="always")
def _next(state):
    return state * np.uint64(6364136223846793005) + np.uint64(1442695040888963407)


@njit(nogil=True, boundscheck=False)
def _fill(x, lo, hi, seed):
    """Nonzero, non-repeating values in [0.5, 1.5): cheap to draw for gigabyte arrays."""
    state = _seeded(seed, lo)
    y = x[lo:hi]
    for i in range(y.size):
        state = _next(state)
        y[i] = 0.5 + (state >> np.uint64(11)) * (1.0 / 9007199254740992.0)


# Half dtypes: 1.m with the mantissa's bits drawn, as bit patterns (numba has no half type):
# values in [1, 2). Drawn in float32 and converted by torch instead, gigabyte arrays cost seconds
# of converting (and first-touching, on torch's threads) on a small CPU.
HALF_BITS = {"float16": (0x3C00, 10), "bfloat16": (0x3F80, 7)}  # 1.0's bits, mantissa bits


@njit(nogil=True, boundscheck=False)
def _fill_half(x, lo, hi, seed, one, shift):
    """x (16-bit patterns): `one` | a drawn mantissa, _fill's generator."""
    state = _seeded(seed, lo)
    y = x[lo:hi]
    for i in range(y.size):
        state = _next(state)
        y[i] = np.uint16(one) | np.uint16(state >> np.uint64(shift))


def _fill_slices(kernel, cpus, x, seed, *extra) -> None:
    """kernel over x, each worker its own slice (first touch: pages in its node)."""
    parts = split(x.size, len(cpus), 4096)
    team(cpus).run(kernel, [(x, lo, hi, seed + k, *extra) for k, (lo, hi) in enumerate(parts)])


def fill(cpus, x, seed: int = 0) -> None:
    """Fill x with `_fill` values."""
    _fill_slices(_fill, cpus, x, seed)


def fill_half(cpus, bits: np.ndarray, dtype: str, seed: int = 0) -> None:
    """Fill `bits` (a half tensor's uint16 view) with values in [1, 2)."""
    one, mantissa = HALF_BITS[dtype]
    _fill_slices(_fill_half, cpus, bits, seed, one, 64 - mantissa)

HUGE_PAGE = 2 << 20
# Arrays streamed together start this far apart within a 2 MiB page (a third of it, in whole
# cache lines), as STREAM's arrays lie in its static memory: at one offset, element i of each
# array falls in the same DRAM bank. Arrays at one offset stream measurably slower than staggered
# ones, in rooflab's triad and in STREAM's own binary alike (docs/benchmarks.md).
STAGGER = HUGE_PAGE // 3 // 64 * 64


def host_empty(n: int, dtype, index: int = 0, huge_pages: bool = True):
    """An uninitialised 1-D CPU tensor of n elements starting `index` x STAGGER bytes past a 2 MiB
    boundary (index: the array's place among those streamed together).

    huge_pages: in memory numpy allocates, which asks the kernel for huge pages (madvise
    MADV_HUGEPAGE, where transparent huge pages are 'madvise', the default): a cache-resident
    stream over 4 KiB pages pays a TLB miss per page. Else in an anonymous mapping of its own (no
    madvise: the system's default pages, those STREAM's static arrays get), for the DRAM window:
    there each miss is hidden behind DRAM's latency (the triad reads the same on either page
    size), and a huge page's first touch can cost more than streaming it (a few times what 4 KiB
    pages cost). numpy's 16-byte offset from the page would split every 64-byte vector over two
    cache lines: the tensor starts on a cache line either way."""
    import torch

    size = dtype.itemsize
    offset = index % 3 * STAGGER
    nbytes = n * size + HUGE_PAGE + offset
    # not huge: a mapping of its own, never heap memory that numpy advised for an earlier array
    raw = np.empty(nbytes, np.uint8) if huge_pages else np.frombuffer(mmap.mmap(-1, nbytes),
                                                                      np.uint8)
    skip = -raw.ctypes.data % HUGE_PAGE + offset
    return torch.from_numpy(raw[skip:skip + n * size]).view(dtype)


def filled(cpus, n: int, dtype, seed: int, index: int = 0, huge_pages: bool = True):
    """A torch CPU tensor of n values in dtype (host_empty's memory), drawn by the team, each
    worker first-touching its slice: `fill`'s [0.5, 1.5) for float32/float64, `fill_half`'s
    [1, 2) for float16/bfloat16. torch.randn with a generator draws on one thread: tens of
    seconds over a large machine's two half-dtype bandwidth jobs."""
    import torch

    t = host_empty(n, dtype, index, huge_pages)
    if dtype in (torch.float32, torch.float64):
        fill(cpus, t.numpy(), seed=seed)
    else:
        fill_half(cpus, t.view(torch.uint16).numpy(), str(dtype).removeprefix("torch."), seed)
    return t
