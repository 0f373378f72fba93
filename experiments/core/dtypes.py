"""Dtype names used in configs, and what each means to torch (imported when first asked: the
config checks and the analysis steps, `rooflab run`'s closing summary among them, need the names
alone, and importing torch takes a small CPU about a second)."""

from __future__ import annotations

from contextlib import contextmanager
from enum import Enum


class Dtype(str, Enum):
    """Names a config may use. tf32 is float32 storage computed on TF32 tensor cores."""

    float64 = "float64"
    float32 = "float32"
    tf32 = "tf32"
    float16 = "float16"
    bfloat16 = "bfloat16"
    float8_e4m3 = "float8_e4m3"


TORCH_NAME = {  # the torch dtype of each name
    "float64": "float64",
    "float32": "float32",
    "tf32": "float32",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "float8_e4m3": "float8_e4m3fn",
}


# Plain storage types: elementwise kernels and copies run on these; tf32 and fp8 are matmul modes.
STORAGE = ("float64", "float32", "float16", "bfloat16")


def torch_dtype(name: str):
    import torch

    return getattr(torch, TORCH_NAME[name])


def itemsize(name: str) -> int:
    return torch_dtype(name).itemsize


@contextmanager
def tf32_matmul(enabled: bool):
    """TF32 tensor cores for float32 matmuls on or off inside the block (no effect on a CPU)."""
    import torch

    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
