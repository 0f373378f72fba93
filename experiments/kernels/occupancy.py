"""How many blocks of a compiled kernel an SM holds at once (CUDA's occupancy rules)."""

from __future__ import annotations

import math

import torch

# resident blocks per SM by compute capability (32 on the others)
MAX_BLOCKS_PER_SM = {(7, 5): 16, (8, 6): 16, (8, 7): 16, (8, 9): 24, (12, 0): 24}
REGS_PER_SM = 65536
REG_UNIT = 256  # registers are allocated per warp in units of 256


def resident_blocks(n_regs: int, shared_bytes: int, num_warps: int, *, threads_per_sm: int = 2048,
                    smem_per_sm: int = 233472, max_blocks: int = 32) -> int:
    """Blocks one SM holds at once, given what the compiled kernel uses."""
    by_threads = threads_per_sm // (32 * num_warps)
    regs_per_warp = math.ceil(n_regs * 32 / REG_UNIT) * REG_UNIT
    by_regs = REGS_PER_SM // regs_per_warp // num_warps if n_regs else max_blocks
    by_smem = smem_per_sm // shared_bytes if shared_bytes else max_blocks
    return min(max_blocks, by_threads, by_regs, by_smem)


def blocks_per_sm(device, compiled, num_warps: int) -> int | None:
    """Resident blocks per SM of triton's compiled kernel on `device`; None under the
    interpreter (it compiles nothing)."""
    if getattr(compiled, "n_regs", None) is None and hasattr(compiled, "_init_handles"):
        compiled._init_handles()  # loads the module: registers are known from then on
    n_regs = getattr(compiled, "n_regs", None)
    if n_regs is None:
        return None
    shared = getattr(getattr(compiled, "metadata", None), "shared", 0) or 0
    props = torch.cuda.get_device_properties(device)
    return resident_blocks(
        n_regs, shared, num_warps,
        threads_per_sm=getattr(props, "max_threads_per_multi_processor", 2048),
        smem_per_sm=getattr(props, "shared_memory_per_multiprocessor", 233472),
        max_blocks=MAX_BLOCKS_PER_SM.get((props.major, props.minor), 32))
