"""The Triton kernel that the intensity and launch experiments time (its math: kernels/chain.py): y[i] = f(x[i]), f a chain of
`fmas` FMAs y <- y*a + x starting from y = x.

The array is cut into tiles of `block` consecutive elements, each read once and written once.
Triton spreads a tile over the program's threads, so every thread holds block / (32 num_warps)
independent chains and interleaves them (mixbench-style): FMA latency is hidden and the FMA pipes,
not the chain, set the pace. The loop issues UNROLL FMAs per chain per trip, so its trip overhead
(3 instructions: counter, compare, branch) is < 1 % of the trip.

fp16/bf16 stay half and run packed two-wide (HFMA2 / HFMA2.BF16_V2: half2 math, which Hopper
runs at twice the FP32 rate). Left to triton, the half loop is packed HFMA2 with `a` a broadcast
half (`R.H0_H0` operand), and ptxas then puts every HFMA2 on the FMA pipe: no faster than FFMA
(fp16 measures at fp32's rate). With `a` a full 32-bit word holding it twice, ptxas alternates
HFMA2 and HFMA2.MMA (the second pipe half2 math can use). So the compiled
kernel views the halves as 32-bit pairs (`packed`), keeps the chains in those words across the
loop (no PRMT repacking between trips either) and issues fma.rn.f16x2 / fma.rn.bf16x2 on them
through inline PTX, `a` splatted into both halves: same rounding, same results.
tests/system/experiments/test_intensity.py compiles the kernel for sm_90 ahead of time and checks
the loop's SASS.

Launch shapes: by default one program per tile (grid = cdiv(n, block)): the launch experiment's
fixed work per block. With persistent=True (the intensity sweep) the grid is exactly one full
wave, SMs x the blocks an SM holds at once, and each program strides over tiles, loading its next
tile before computing the current one: no block launches and no exposed DRAM latency between
tiles, and no partly filled last wave of blocks (65536 tiles over 132 SMs x B leaves one), only
a one-tile imbalance between programs.

Imported only where a kernel runs (GPU jobs, tests), so CPU-only installs need no triton. Under
TRITON_INTERPRET=1 the kernel runs unpacked (the interpreter runs no inline PTX and has no bf16
arithmetic), and persistent=True is ignored (an explicit `programs` still strides).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from experiments.kernels.occupancy import blocks_per_sm

# FMAs per chain per loop trip: 256 FMA instructions a trip per thread at the default 16 elements
# (8 packed words) per thread, so the trip's 3 instructions of overhead are ~1 %, and the loop's
# code (4 KiB) stays small for the instruction caches
UNROLL = 16
UNROLL_PACKED = 32
HALF = (torch.float16, torch.bfloat16)


@triton.jit
def _fma(y, a, x, PACKED: tl.constexpr, BF16: tl.constexpr):
    """y*a + x: elementwise, or on 32-bit words holding two halves each (PACKED)."""
    if PACKED:
        if BF16:
            return tl.inline_asm_elementwise("fma.rn.bf16x2 $0, $1, $2, $3;", "=r,r,r,r",
                                             [y, a, x], dtype=tl.int32, is_pure=True, pack=1)
        else:
            return tl.inline_asm_elementwise("fma.rn.f16x2 $0, $1, $2, $3;", "=r,r,r,r",
                                             [y, a, x], dtype=tl.int32, is_pure=True, pack=1)
    else:
        return tl.fma(y, a, x)


# The trip counts are not specialized: one compiled kernel serves every chain length.
@triton.jit(do_not_specialize=["steps", "rest"])
def fma_chain_kernel(x_ptr, y_ptr, n, a, steps, rest, BLOCK: tl.constexpr,
                     UNROLL: tl.constexpr, PACKED: tl.constexpr = False):
    """y = f(x) over n items in tiles of BLOCK items, tile pid, pid + programs, ...; an item is
    an element, or with PACKED (fp16/bf16) a 32-bit word holding two consecutive elements.
    Each chain runs steps * UNROLL + rest FMAs."""
    dtype = x_ptr.dtype.element_ty
    if PACKED:
        # a in both halves of a word: (bits << 16) | bits
        bits = a.to(dtype).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
        a = tl.full([BLOCK], (bits << 16) | bits, tl.int32)
        x_ptr = x_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
        y_ptr = y_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
    else:
        # the constant in x's dtype: fp16/bf16 math stays half (a float32 scalar would promote it)
        a = tl.full([BLOCK], a, tl.float32).to(dtype)
    tiles = tl.cdiv(n, BLOCK)
    programs = tl.num_programs(0)
    tile = tl.program_id(0)
    offs = tile.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    while tile < tiles:
        # the next tile's load is in flight while this one computes (masked off past the end).
        # Offsets come from the tile index, not carried through the loop, so triton still sees
        # BLOCK-aligned contiguous runs and vectorizes the accesses (128-bit).
        offs = tile.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        nxt = (tile + programs).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        x_next = tl.load(x_ptr + nxt, mask=nxt < n)
        y = x
        # `while`, not `range(steps)`: triton 3.6's interpreter cannot iterate a runtime range
        i = 0
        while i < steps:
            for _ in tl.static_range(UNROLL):
                y = _fma(y, a, x, PACKED, dtype == tl.bfloat16)
            i += 1
        i = 0
        while i < rest:
            y = _fma(y, a, x, PACKED, dtype == tl.bfloat16)
            i += 1
        tl.store(y_ptr + offs, y, mask=offs < n)
        x = x_next
        tile += programs


# TRITON_INTERPRET=1 makes triton.jit return an InterpretedFunction
INTERPRETED = not isinstance(fma_chain_kernel, triton.runtime.JITFunction)


def packs(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether the compiled kernel can run x, y as 32-bit pairs of halves."""
    return (x.dtype in HALF and not INTERPRETED and x.numel() % 2 == 0
            and x.data_ptr() % 4 == 0 and y.data_ptr() % 4 == 0)


_SLOTS: dict = {}


def wave_slots(x: torch.Tensor, compiled, num_warps: int) -> int:
    """Blocks of this compiled kernel that all SMs hold at once: SMs x resident blocks per SM."""
    per_sm = blocks_per_sm(x.device, compiled, num_warps) or 1
    return torch.cuda.get_device_properties(x.device).multi_processor_count * max(1, per_sm)


def fma_chain(x: torch.Tensor, y: torch.Tensor, fmas: int, a: float, *, block: int,
              num_warps: int, persistent: bool = False, programs: int | None = None):
    """Launch y = f(x) over tiles of `block` elements; returns triton's compiled kernel.

    One program per tile; at most `programs` programs, each striding over the tiles; with
    persistent=True on a GPU, one full wave of programs (SMs x resident blocks per SM)."""
    packed = packs(x, y)
    n, tile = (x.numel() // 2, block // 2) if packed else (x.numel(), block)
    unroll = UNROLL_PACKED if packed else UNROLL
    args = (x, y, n, a, fmas // unroll, fmas % unroll)
    kw = dict(BLOCK=tile, UNROLL=unroll, PACKED=packed, num_warps=num_warps)
    if persistent and x.is_cuda and not INTERPRETED:
        key = (x.device, x.dtype, block, num_warps, packed)
        if key not in _SLOTS:
            _SLOTS[key] = wave_slots(x, fma_chain_kernel.warmup(*args, grid=(1,), **kw),
                                     num_warps)
        programs = min(programs or _SLOTS[key], _SLOTS[key])
    grid = triton.cdiv(n, tile)
    if programs:
        grid = max(1, min(grid, programs))
    return fma_chain_kernel[(grid,)](*args, **kw)


def aot_compile(dtype: str, *, block: int, num_warps: int, capability: int = 90):
    """Compile, without a GPU, the kernel that fma_chain launches on a GPU of this compute
    capability for `dtype` ("fp32", "fp16", "bf16", "fp64") arrays that are 16-byte aligned with
    n % 16 == 0 (triton specializes both, as for every array the experiments allocate).
    Returns triton's compiled kernel: .asm["ptx"], .asm["cubin"] (SASS: cuobjdump -sass)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    packed = dtype in ("fp16", "bf16")
    sig = {"x_ptr": "*" + dtype, "y_ptr": "*" + dtype, "n": "i32", "a": "fp32", "steps": "i32",
           "rest": "i32", "BLOCK": "constexpr", "UNROLL": "constexpr", "PACKED": "constexpr"}
    src = ASTSource(fma_chain_kernel, sig,
                    constexprs={"BLOCK": block // 2 if packed else block,
                                "UNROLL": UNROLL_PACKED if packed else UNROLL, "PACKED": packed},
                    attrs={(i,): [["tt.divisibility", 16]] for i in range(3)})
    return triton.compile(src, target=GPUTarget("cuda", capability, 32),
                          options={"num_warps": num_warps})
