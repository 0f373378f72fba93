"""The checks every experiment makes before and after it times something, written once.

* `need_storage_dtype`: elementwise kernels and copies run on plain dtypes; tf32 and fp8 are
  matmul compute modes, so their rows are `not_applicable`, with the reason.
* `need_host_memory`: a CPU allocation past memory gets the process killed, not an exception, so
  a point that would not fit fails first, as an `oom` row.
* `check_close`: what was timed computed the right thing: no unwritten (NaN-poisoned) element
  anywhere, and a relative error against a float64 reference under the tolerance.
"""

from __future__ import annotations

from typing import Callable

import torch

from experiments.core.dtypes import STORAGE
from experiments.core.runner import NotApplicable, WrongResult

HEADROOM = 1.2  # a CPU point needs this much more free memory than its arrays take


def need_storage_dtype(dtype: str, what: str = "this kernel runs on plain dtypes") -> None:
    if dtype not in STORAGE:
        raise NotApplicable(f"{dtype} is a matmul compute mode, not a storage type: {what}")


def need_host_memory(ctx, nbytes: float) -> None:
    """On a CPU, raise MemoryError (an `oom` row) when `nbytes` would not fit in free memory."""
    if ctx.device.type == "cpu" and nbytes * HEADROOM > ctx.free_memory():
        raise MemoryError(f"out of memory: {int(nbytes)} bytes needed, "
                          f"{ctx.free_memory()} available")


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref||, in float64."""
    ref = ref.double()
    return ((out.double().to(ref.device) - ref).norm() / ref.norm()).item()


def has_nan(t: torch.Tensor) -> bool:
    """Whether any element of t is NaN. A finite sum says none is (a NaN or inf anywhere makes
    it NaN or inf): a parallel reduction, where isnan(t).any() first writes a bool per element
    (about ten times the sum's time on a small CPU). float16's sum overflows,
    so its max stands in (NaN-propagating too); a sum or max that is not finite decides nothing,
    and isnan then does."""
    if not t.numel():
        return False
    try:
        if torch.isfinite(t.amax() if t.dtype == torch.float16 else t.sum()):
            return False
    except (RuntimeError, NotImplementedError):  # a dtype without sum (float8 on some builds)
        pass
    return bool(torch.isnan(t).any())


def check_close(out: torch.Tensor, ref: torch.Tensor | Callable[[], torch.Tensor], tol: float,
                what: str, step: int = 1) -> float:
    """Relative error of out[::step] against `ref` (a float64 tensor of those elements, or a
    function computing it, called only after the NaN check passed); raises WrongResult."""
    if has_nan(out):
        raise WrongResult(f"{what}: output has unwritten (NaN-poisoned) elements")
    err = relative_error(out.reshape(-1)[::step] if step > 1 else out,
                         ref() if callable(ref) else ref)
    if not err <= tol:
        raise WrongResult(f"{what}: relative error {err:.3g} above {tol:g}")
    return err
