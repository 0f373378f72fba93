"""The Triton kernel that the intensity and launch experiments time: y[i] = f(x[i]), f a chain of
`fmas` FMAs y <- y*a + x starting from y = x.

Each program owns BLOCK consecutive elements, read once and written once. Triton spreads them
over the program's threads, so every thread holds BLOCK / (32 num_warps) independent chains and
interleaves them (mixbench-style): FMA latency is hidden and the FMA pipes, not the chain, set the
pace. fp16/bf16 math stays in the half dtype, and for sm_90 triton 3.6 packs it two-wide
(fma.rn.f16x2 / fma.rn.bf16x2, the half2 path of mixbench; tests/test_intensity.py compiles the
kernel ahead of time and checks the PTX). Imported only where a kernel runs (GPU jobs, tests), so
CPU-only installs need no triton.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

UNROLL = 8  # FMAs per loop trip: loop overhead is noise next to UNROLL * chains FMAs


# The trip counts are not specialized: one compiled kernel serves every chain length.
@triton.jit(do_not_specialize=["steps", "rest"])
def fma_chain_kernel(x_ptr, y_ptr, n, a, steps, rest, BLOCK: tl.constexpr,
                     UNROLL: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    # the constant in x's dtype: fp16/bf16 math stays half (a float32 scalar would promote it)
    a = tl.full([BLOCK], a, tl.float32).to(x_ptr.dtype.element_ty)
    y = x
    # `while`, not `range(steps)`: triton 3.6's interpreter cannot iterate a runtime range
    i = 0
    while i < steps:
        for _ in tl.static_range(UNROLL):
            y = tl.fma(y, a, x)
        i += 1
    i = 0
    while i < rest:
        y = tl.fma(y, a, x)
        i += 1
    tl.store(y_ptr + offs, y, mask=mask)


def fma_chain(x: torch.Tensor, y: torch.Tensor, fmas: int, a: float, *, block: int,
              num_warps: int):
    """Launch y = f(x) over cdiv(n, block) programs; returns triton's compiled kernel."""
    n = x.numel()
    return fma_chain_kernel[(triton.cdiv(n, block),)](
        x, y, n, a, fmas // UNROLL, fmas % UNROLL, BLOCK=block, UNROLL=UNROLL,
        num_warps=num_warps)
