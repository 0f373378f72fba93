"""The copy kernel of the peer_copy experiment: y[i] = x[i], run on the SMs of the GPU that holds x,
storing into y on a peer GPU through peer access (a "push", as torch's own cross-device copy
kernel does). Imported only where a kernel runs (GPU jobs, tests); under TRITON_INTERPRET=1 it
runs on CPU tensors, which is how the tests check it copies every element."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 4096  # elements per program: 16 KiB of float32, 16 per thread at 8 warps
NUM_WARPS = 8


@triton.jit
def _copy(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)  # int64: 1 GiB and past
    mask = offs < n
    tl.store(y + offs, tl.load(x + offs, mask=mask), mask=mask)


def copy(x: torch.Tensor, y: torch.Tensor) -> None:
    """y <- x on the current device's current stream (x, y contiguous, same dtype and size)."""
    n = x.numel()
    _copy[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK, num_warps=NUM_WARPS)
