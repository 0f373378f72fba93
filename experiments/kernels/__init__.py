"""GPU kernels, below the experiments that time them.

`chain` (the FMA chain's math: its constant, float64 reference and check) and `occupancy`
(CUDA's resident-block rules) need only torch. `fma_chain` and `reread` are Triton kernels:
import them through `load`, so a CPU-only install without triton gets an `unsupported` row, not an
ImportError.
"""

from __future__ import annotations

import importlib


def load(name: str):
    """experiments.kernels.<name>, a Triton kernel module, imported only when a GPU point runs."""
    from experiments.core.runner import Unsupported

    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ImportError as exc:
        raise Unsupported(f"the GPU kernel is a Triton kernel and triton is missing: {exc}")
