"""The L1 kernel: every program rereads its own small set of tiles, `passes` times, summing them.

Program p owns `span` consecutive elements (span / block tiles). Once the first pass has pulled
them in, the set stays resident in the SM's L1 as long as the sets of the programs on that SM fit
there, so later passes stream from L1 (or from L2 once they do not: the curve over the set's size
shows where). Loads ask for caching in L1 (`.ca`). The tile a load reads depends on the loop
counter and the runtime tile count, so the compiler can neither hoist loads out of the loop nor
merge two of them (either would time fewer loads than counted: an impossible bandwidth). Each thread keeps a float32 sum per element: one add per
element loaded, and the result, passes x the sum of the program's tiles, is checkable.

Imported only where a kernel runs (GPU jobs, tests); under TRITON_INTERPRET=1 it runs on CPU
tensors, which is how the tests check what it computes.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

UNROLL = 4  # tiles loaded per loop trip: independent loads in flight


# `tiles` and `loads` are runtime values, never specialized: with tiles a known constant the
# compiler can prove which tile each unrolled load reads (with 2 or 4 tiles, the same ones every
# trip) and merge or hoist those loads; the kernel then reads twice what the L1 can serve.
# The tile index is carried from load to load, so no load's address is known at compile time.
@triton.jit(do_not_specialize=["loads", "tiles"])
def _reread(x_ptr, out_ptr, loads, tiles, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    pid = tl.program_id(0)
    base = pid.to(tl.int64) * tiles * BLOCK
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    k = 0
    tile = 0
    while k < loads:  # `loads` tile loads in all, UNROLL per trip, cycling over the tiles
        for u in tl.static_range(UNROLL):
            acc += tl.load(x_ptr + base + tile * BLOCK + lanes, cache_modifier=".ca").to(tl.float32)
            # the next tile, wrapping: a compare and select (a runtime `%` is a division, ~20
            # instructions per load, holding the kernel far below the L1's rate)
            tile = tl.where(tile + 1 == tiles, 0, tile + 1)
        k += UNROLL
    tl.store(out_ptr + pid.to(tl.int64) * BLOCK + lanes, acc)


def reread(x: torch.Tensor, out: torch.Tensor, *, programs: int, span: int, block: int,
           passes: int, num_warps: int):
    """out[p] = passes x sum of program p's span / block tiles of x (float32 out of shape
    (programs, block)); x holds programs x span elements. passes x tiles must be a multiple of
    UNROLL (plan() picks passes so)."""
    tiles = span // block
    return _reread[(programs,)](x, out, passes * tiles, tiles, BLOCK=block, UNROLL=UNROLL,
                                num_warps=num_warps)


def reference(x: torch.Tensor, programs: int, span: int, block: int, passes: int) -> torch.Tensor:
    """What reread computes, in float64."""
    return passes * x.double().reshape(programs, span // block, block).sum(dim=1)
