"""Launch geometry (C20): fixed work per block against grid size and warps per block.

Every Triton program (a thread block) runs the FMA chain of experiments/kernels/fma_chain.py on its own
tile: `tile` elements x `iters` FMAs, the same work whatever the grid. One block of >= 4 warps
keeps an SM's FMA pipes busy, so a second block on the same SM halves both: the time follows
ceil(grid / SMs), flat within a wave and stepping up as the grid passes each whole number of
waves. The wave sweep shows that step (grid = waves x SMs x blocks_per_sm, in steps of 1/8 wave);
the warp sweep shows how few warps per block leave an SM's schedulers idle. Rows record the SM
count, the waves, and the occupancy the compiled kernel allows (registers, threads, shared memory).
A CPU has no SMs or warps: its rows are not_applicable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from omegaconf import MISSING

from experiments import kernels
from experiments.core.config import ConfigError, ExperimentConfig
from experiments.core.checks import need_storage_dtype
from experiments.core.dtypes import itemsize, torch_dtype
from experiments.core.harness import Point, State
from experiments.core.runner import Context
from experiments.kernels.chain import A, check, check_block, check_warps
from experiments.kernels.occupancy import blocks_per_sm

NAME = "launch"
DESCRIPTION = "fixed work per block vs grid size (0.5 to 4 waves over the SMs) and warps per block"
NOT_ON = ("cpu",)  # a CPU has no SMs or warps: a sweep plans no CPU job

@dataclass
class LaunchConfig(ExperimentConfig):
    name: str = NAME
    min_waves: float = MISSING  # the wave sweep: grid from min_waves to max_waves waves
    max_waves: float = MISSING
    wave_step: float = MISSING
    num_warps: int = MISSING  # warps per block in the wave sweep
    warps: list[int] = MISSING  # the warp sweep...
    warp_waves: list[float] = MISSING  # ...at these waves
    blocks_per_sm: int = MISSING  # blocks that one wave puts on each SM
    tile: int = MISSING  # elements each block owns
    iters: int = MISSING  # FMAs per element: a block's fixed work is tile x iters FMAs

    RULES = {"blocks_per_sm": "int >= 1", "iters": "int >= 0"}

    def __post_init__(self):
        super().__post_init__()
        if not 0 < self.min_waves <= self.max_waves:
            raise ConfigError(f"experiment.min_waves={self.min_waves} and max_waves="
                              f"{self.max_waves} must satisfy 0 < min_waves <= max_waves")
        if not 0 < self.wave_step or (self.max_waves - self.min_waves) / self.wave_step > 1000:
            raise ConfigError(f"experiment.wave_step={self.wave_step} must be > 0 and give at "
                              "most 1000 points")
        check_warps("experiment.num_warps", [self.num_warps])
        check_warps("experiment.warps", self.warps)
        if any(not w > 0 for w in self.warp_waves):
            raise ConfigError(f"experiment.warp_waves={list(self.warp_waves)}; "
                              "every entry must be > 0")
        check_block("experiment.tile", self.tile)


Config = LaunchConfig


def wave_points(cfg: LaunchConfig) -> list[float]:
    count = int((cfg.max_waves - cfg.min_waves) / cfg.wave_step + 1e-9) + 1
    return [round(cfg.min_waves + i * cfg.wave_step, 9) for i in range(count)]


def grid_size(waves: float, sms: int, blocks_per_sm: int) -> int:
    """Blocks in `waves` waves, rounded half up (never zero)."""
    return max(1, math.floor(waves * sms * blocks_per_sm + 0.5))


def _occupancy(ctx: Context, compiled, num_warps: int, grid: int) -> dict:
    blocks = blocks_per_sm(ctx.device, compiled, num_warps)
    if blocks is None:  # the interpreter compiles nothing
        return {"n_regs": None, "resident_blocks_per_sm": None, "resident_waves": None}
    return {"n_regs": compiled.n_regs, "n_spills": getattr(compiled, "n_spills", None),
            "shared_bytes": getattr(compiled.metadata, "shared", 0) or 0,
            "resident_blocks_per_sm": blocks,
            "resident_waves": grid / (ctx.facts.compute_units * blocks) if blocks else None}


NO_SMS = "a CPU has no SMs, warps or thread blocks: grid waves and warps per block are GPU notions"


def measure(state: State) -> dict:
    ctx, cfg, grid, num_warps = state.ctx, state.cfg, state.args["grid"], state.args["num_warps"]
    need_storage_dtype(ctx.dtype)
    kernel = kernels.load("fma_chain")
    x = ctx.randn(grid * cfg.tile, dtype=torch_dtype(ctx.dtype))
    y = torch.full_like(x, float("nan"))
    call = lambda i: kernel.fma_chain(x, y, cfg.iters, A, block=cfg.tile, num_warps=num_warps)
    compiled = call(0)
    ctx.sync()
    err = check(ctx.dtype, x, y, cfg.iters)  # every block wrote its own tile, correctly
    return state.time(call) | {"rel_error": err, "check_passed": True, "params":
                               state.row["params"] | _occupancy(ctx, compiled, num_warps, grid)}


def points(cfg: LaunchConfig, ctx: Context) -> list[Point]:
    """The wave sweep, then the warp sweep; on a CPU each not_applicable, in the same shape."""
    gpu = ctx.device.type == "cuda"
    sms = ctx.facts.compute_units if gpu else None  # on a CPU: cores, not SMs
    size = itemsize(ctx.dtype)
    sweep = [("wave_sweep", w, cfg.num_warps) for w in wave_points(cfg)]
    sweep += [("warp_sweep", w, nw) for nw in cfg.warps for w in cfg.warp_waves]
    out = []
    for op, waves, num_warps in sweep:
        params = {"num_warps": num_warps, "blocks_per_sm": cfg.blocks_per_sm, "tile": cfg.tile,
                  "iters": cfg.iters, "waves": waves, "sms": sms}
        base = {"op": op, "variant": "triton", "params": params}
        if not gpu:
            out.append(Point(base, status="not_applicable", message=NO_SMS))
            continue
        grid = grid_size(waves, sms, cfg.blocks_per_sm)
        params |= {"grid": grid, "waves": grid / (sms * cfg.blocks_per_sm)}
        n = grid * cfg.tile
        base |= {"n": n, "flops": 2.0 * cfg.iters * n, "bytes": 2.0 * n * size,
                 "working_set_bytes": 2 * n * size}
        out.append(Point(base, args={"grid": grid, "num_warps": num_warps}))
    return out
