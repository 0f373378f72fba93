"""Dtype names used in configs, and what each means to torch."""

from __future__ import annotations

from contextlib import contextmanager
from enum import Enum

import torch


class Dtype(str, Enum):
    """Names a config may use. tf32 is float32 storage computed on TF32 tensor cores."""

    float64 = "float64"
    float32 = "float32"
    tf32 = "tf32"
    float16 = "float16"
    bfloat16 = "bfloat16"
    float8_e4m3 = "float8_e4m3"


TORCH_DTYPE = {
    "float64": torch.float64,
    "float32": torch.float32,
    "tf32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float8_e4m3": torch.float8_e4m3fn,
}


# Plain storage types: elementwise kernels and copies run on these; tf32 and fp8 are matmul modes.
STORAGE = ("float64", "float32", "float16", "bfloat16")


def torch_dtype(name: str) -> torch.dtype:
    return TORCH_DTYPE[name]


def itemsize(name: str) -> int:
    return torch.empty((), dtype=TORCH_DTYPE[name]).element_size()


@contextmanager
def tf32_matmul(enabled: bool):
    """TF32 tensor cores for float32 matmuls on or off inside the block (no effect on a CPU)."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
