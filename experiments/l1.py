"""L1 bandwidth: each thread block rereads its own resident tiles (experiments/kernels/reread.py).

Every SM runs `blocks_per_sm` programs, each owning (resident bytes per SM) / blocks_per_sm of
the array; after the first pass the later ones stream from L1 while the SM's sets fit in it. The
sweep over the resident bytes per SM shows the L1 plateau, then the fall to L2 speed once the
sets spill: the plateau is the `l1_bw` ceiling (experiments/analysis/roofline.py). Bytes are the
tiles loaded (every pass counts), FLOPs the adds that keep the loads live. A GPU's L1 is per SM,
so its aggregate capacity (SMs x ~256 KB) is no working-set window of the bandwidth curve, which
is why it has its own kernel. On a CPU the bandwidth experiment's smallest sizes show L1: rows
here are not_applicable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from omegaconf import MISSING

from experiments import kernels
from experiments.core.config import ConfigError, ExperimentConfig
from experiments.core.checks import check_close, need_storage_dtype
from experiments.core.dtypes import itemsize, torch_dtype
from experiments.core.harness import Point, State
from experiments.core.runner import Context
from experiments.kernels.chain import check_block, check_warps
from experiments.kernels.occupancy import blocks_per_sm

NAME = "l1"
DESCRIPTION = "each block rereads its own tiles: L1 bandwidth, and where the sets spill to L2"
NOT_ON = ("cpu",)  # a CPU's L1 is the bandwidth experiment's: a sweep plans no CPU job

# relative error of passes x a float32 sum of the tiles against float64: at most about one
# rounding per add (loads x 6e-8, under 1e-3 for the sweep's loads); garbage lands near 1
TOLERANCE = 1e-3
NO_SMS = ("a GPU's L1 is per SM, measured by blocks rereading resident tiles; on a CPU the "
          "bandwidth experiment's smallest sizes show L1")


@dataclass
class L1Config(ExperimentConfig):
    name: str = NAME
    sizes: list[int] = MISSING  # bytes resident per SM (all its blocks' tiles together)
    blocks_per_sm: int = MISSING  # programs per SM: the grid is SMs x blocks_per_sm
    block_bytes: int = MISSING  # bytes of one tile (one load of a program)
    num_warps: int = MISSING
    bytes_per_call: int = MISSING  # tiles loaded by one call, all programs, all passes

    RULES = {"sizes": "sizes", "blocks_per_sm": "int >= 1", "bytes_per_call": "int >= 1"}

    def __post_init__(self):
        super().__post_init__()
        check_block("experiment.block_bytes", self.block_bytes)
        check_warps("experiment.num_warps", [self.num_warps])
        for size in self.sizes:
            tiles = size / self.blocks_per_sm / self.block_bytes
            if tiles < 1 or tiles != int(tiles):
                raise ConfigError(
                    f"experiment.sizes has {size}: bytes per SM / blocks_per_sm "
                    f"({self.blocks_per_sm}) / block_bytes ({self.block_bytes}) must be a whole "
                    f"number >= 1 (tiles per program), here {tiles:g}")


Config = L1Config


def plan(cfg: L1Config, sms: int, size: int, item: int) -> dict:
    """A point's shape: programs, elements per program (span) and per tile, and passes (a multiple
    of the kernel's unroll, so every tile is loaded exactly `passes` times)."""
    from experiments.kernels.reread import UNROLL

    programs = sms * cfg.blocks_per_sm
    span_bytes = size // cfg.blocks_per_sm
    tiles = span_bytes // cfg.block_bytes
    # passes x tiles loads, a multiple of UNROLL (the kernel's trip), so no tile is loaded extra
    step = UNROLL // math.gcd(UNROLL, tiles)
    passes = math.ceil(cfg.bytes_per_call / (programs * span_bytes) / step) * step
    return {"programs": programs, "span": span_bytes // item, "block": cfg.block_bytes // item,
            "passes": passes, "resident_bytes_per_sm": size, "blocks_per_sm": cfg.blocks_per_sm,
            "num_warps": cfg.num_warps}


def measure(state: State) -> dict:
    ctx, cfg, p = state.ctx, state.cfg, state.args["p"]
    need_storage_dtype(ctx.dtype)
    kernel = kernels.load("reread")
    x = ctx.randn(p["programs"] * p["span"], dtype=torch_dtype(ctx.dtype))
    out = torch.full((p["programs"], p["block"]), float("nan"), device=ctx.device)
    call = lambda i: kernel.reread(x, out, programs=p["programs"], span=p["span"],
                                   block=p["block"], passes=p["passes"], num_warps=cfg.num_warps)
    compiled = call(0)
    ctx.sync()
    err = check_close(out, lambda: kernel.reference(x, p["programs"], p["span"], p["block"],
                                                     p["passes"]).cpu(), TOLERANCE, "reread")
    resident = blocks_per_sm(ctx.device, compiled, cfg.num_warps) if ctx.device.type == "cuda" \
        else None
    params = {"resident_blocks_per_sm": resident}
    if resident is not None and resident < cfg.blocks_per_sm:
        params["note"] = (f"only {resident} blocks fit on an SM at once: the sets of "
                          f"{cfg.blocks_per_sm} blocks are not all resident together")
    return state.time(call) | {"rel_error": err, "check_passed": True, "params": p | params}


def points(cfg: L1Config, ctx: Context) -> list[Point]:
    """One point per size; on a CPU each a not_applicable row."""
    item = itemsize(ctx.dtype)
    out = []
    for size in cfg.sizes:
        base = {"op": "reread", "variant": "triton"}
        if ctx.device.type != "cuda":
            out.append(Point(base | {"params": {"resident_bytes_per_sm": size}},
                             status="not_applicable", message=NO_SMS))
            continue
        p = plan(cfg, ctx.facts.compute_units, size, item)
        n = p["programs"] * p["span"]
        out.append(Point(base | {"n": n, "working_set_bytes": n * item,
                                 "bytes": float(n * item * p["passes"]),
                                 "flops": float(n * p["passes"]), "params": p}, args={"p": p}))
    return out
