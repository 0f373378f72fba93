"""The CPU FMA chain (its math: kernels/chain.py), compiled by numba: y[i] = f(x[i]), f a chain of
`fmas` FMAs y <- y*a + x starting from y = x, run by a team of pinned threads, one per core.

Why numba: it compiles this plain Python loop with LLVM for the host's own ISA (AVX-512, AVX2,
NEON, SVE: the SIMD width comes from LLVM, no intrinsics here), releases the GIL (nogil) so one
thread per core runs it, and installs as a wheel. torch.compile's C++ backend fuses the chain but
walks it one vector at a time: one dependency chain, so FMA latency, not the FMA pipes, sets the
pace (and compiling a 1024-step chain takes minutes on a small CPU).

Latency is hidden as on a GPU (mixbench-style): a thread takes LANES consecutive elements at a
time and steps all of their chains together. LANES fills half the vector registers (16 of 32 on
AVX-512/NEON, 8 of 16 on AVX2) with accumulators, twice the FMA latency x pipes of current cores
(4 x 2 = 8 vectors); their x operands take the other half. It is at least MIN_LANES: fewer, and
LLVM leaves the step scalar (float64 on AVX2; NEON counts 32 too). The accumulators live in a stack
array (`_stack`: an alloca, which LLVM knows nothing else points to), so LLVM keeps them in
registers across the chain; a heap array would be loaded and stored around every FMA.
fastmath={'contract'} lets LLVM fuse y*a + x into one FMA (numba's default keeps them apart);
no other reassociation, so the result matches the float64 reference within the chain's rounding.
numba has no float16/bfloat16 arithmetic on CPUs: those dtypes are not served here.
"""

from __future__ import annotations

import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.numpy_support import carray

from experiments.kernels.cpu_team import split, team
from experiments.kernels.numba_host import njit, vector_registers

DTYPES = {"float32": np.float32, "float64": np.float64}


# LLVM unrolls a step's loop over fewer lanes than this whole and leaves it scalar: on AVX2
# (16 ymm registers) float64's half-the-registers 32 lanes compiled to scalar FMAs from memory,
# several times slower than 48 lanes (12 registers); 40 stayed scalar too
MIN_LANES = 48


def lanes(itemsize: int) -> int:
    """Elements whose chains one thread steps together: accumulators in half the registers, and
    at least MIN_LANES (in whole vectors)."""
    width, registers = vector_registers()
    per_vector = width // itemsize
    return max(registers // 2 * per_vector, -(-MIN_LANES // per_vector) * per_vector)


_KERNELS: dict[int, object] = {}


def chain_kernel(lane_count: int):
    """The compiled kernel for LANES = lane_count (a constant to LLVM: one per width)."""
    if lane_count in _KERNELS:
        return _KERNELS[lane_count]
    LANES = lane_count

    @intrinsic
    def _stack(typingctx, like):
        """LANES elements of like's dtype on the stack."""
        def codegen(context, builder, sig, args):
            return cgutils.alloca_once(builder, context.get_value_type(like.dtype),
                                       size=context.get_constant(types.intp, LANES))
        return types.CPointer(like.dtype)(like), codegen

    @njit(nogil=True, fastmath={"contract"}, boundscheck=False)
    def chain(x, y, a, fmas, lo, hi):
        acc = carray(_stack(x), LANES)
        a = x.dtype.type(a)
        full = lo + (hi - lo) // LANES * LANES
        for s in range(lo, full, LANES):
            xs = x[s:s + LANES]
            for i in range(LANES):
                acc[i] = xs[i]
            for _ in range(fmas):
                for i in range(LANES):
                    acc[i] = acc[i] * a + xs[i]
            ys = y[s:s + LANES]
            for i in range(LANES):
                ys[i] = acc[i]
        xt, yt = x[full:hi], y[full:hi]
        for j in range(xt.size):  # the tail, one chain at a time
            v = xt[j]
            for _ in range(fmas):
                v = v * a + xt[j]
            yt[j] = v

    _KERNELS[lane_count] = chain
    return chain


def fma_chain(cpus, x: np.ndarray, y: np.ndarray, fmas: int, a: float) -> None:
    """y = f(x) over the team of `cpus`, each worker a contiguous slice."""
    width = lanes(x.itemsize)
    kernel = chain_kernel(width)
    parts = split(x.size, len(cpus), width)
    team(cpus).run(kernel, [(x, y, a, fmas, lo, hi) for lo, hi in parts])
