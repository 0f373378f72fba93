"""The FMA chain's math: y <- y*A + x, `fmas` times from y = x, its float64 reference and check.

A = 0.75 keeps |y| below 4|x| and shrinks each rounding error by A per step, so the result stays
within a few ulps of the float64 reference whatever the length. Used by the intensity and launch
experiments (the Triton kernel is kernels/fma_chain.py; the CPU path is torch ops).
"""

from __future__ import annotations

import torch

from experiments.core.config import ConfigError
from experiments.core.checks import check_close

A = 0.75
# relative error a correct chain stays under: rounding errors decay by A per step, so at most
# about one rounding / (1 - A) = 4 ulps whatever the length; garbage lands near 1
TOLERANCE = {"float64": 1e-12, "float32": 2e-6, "float16": 4e-3, "bfloat16": 3e-2}
CHECK_ELEMENTS = 1 << 16  # the numeric check samples this many; the NaN check covers all
WARPS = (1, 2, 4, 8, 16, 32)


def check_block(key: str, block: int) -> None:
    """Triton tiles are powers of two."""
    if not isinstance(block, int) or block < 16 or block & (block - 1):
        raise ConfigError(f"{key}={block} must be a power of two >= 16")


def check_warps(key: str, values) -> None:
    bad = [w for w in values if w not in WARPS]
    if bad or not list(values):
        raise ConfigError(f"{key} has {bad or 'nothing'}; allowed warps per block: {list(WARPS)}")


def reference(x64: torch.Tensor, fmas: int) -> torch.Tensor:
    """f(x) in float64, in closed form: y_k = A^k x + x (1 - A^k) / (1 - A)."""
    ak = A**fmas
    return x64 * (ak + (1 - ak) / (1 - A))


def check(dtype: str, x: torch.Tensor, y: torch.Tensor, fmas: int) -> float:
    """Relative error of y against the float64 reference on a sample; raises WrongResult."""
    step = max(1, x.numel() // CHECK_ELEMENTS)
    return check_close(y, lambda: reference(x[::step].double().cpu(), fmas), TOLERANCE[dtype],
                       f"fmas={fmas}", step=step)
