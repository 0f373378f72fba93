"""A placed call's output checked: finite, two calls agree, and against float64 where a copy can run."""

from __future__ import annotations
import copy
import torch

from experiments.placement.counting import reachable_tensors, tensors
from torch.utils._pytree import tree_map
from experiments.core.runner import WrongResult


# Relative error (output norm) a correct call stays under: against float64 of the same inputs,
# and between two calls on the same inputs (atomics may reorder sums).
TOLERANCE = {"float64": 1e-10, "float32": 1e-4, "tf32": 1e-2, "float16": 1e-2, "bfloat16": 5e-2,
             "float8_e4m3": 2e-1}


F64_CHECK_MAX_BYTES = 2 << 30  # a float64 copy of the work's operands larger than this: skipped


def rel_error(out, ref) -> float:
    """Largest relative error (norm) over the outputs."""
    errs = []
    for a, b in zip(tensors(out), tensors(ref), strict=True):
        a, b = a.double(), b.to(a.device).double()
        scale = b.norm().item()
        errs.append((a - b).norm().item() / (scale if scale > 0 else 1.0))
    return max(errs)


def _float64(fn, args):
    """A float64 copy of the call, or None where fn holds weights it cannot convert."""
    if isinstance(fn, torch.nn.Module):
        fn64 = copy.deepcopy(fn).double()
    elif reachable_tensors(fn):  # a closure over weights of the dtype: no float64 twin
        return None
    else:
        fn64 = fn
    args64 = tree_map(lambda t: t.double() if isinstance(t, torch.Tensor) and
                      t.is_floating_point() else t, args)
    return fn64, args64


def check(fn, args, kwargs, dtype_name: str, nbytes: float) -> tuple[float, dict]:
    """(relative error, what it was against). Raises WrongResult for a non-finite output, two
    calls that disagree, or an error against float64 above the dtype's tolerance."""
    kwargs = kwargs or {}
    tol = TOLERANCE.get(dtype_name, 1e-2)
    out = fn(*args, **kwargs)
    for t in tensors(out):
        if t.is_floating_point() and not torch.isfinite(t).all():
            raise WrongResult("the output has non-finite elements (NaN or inf)")
    again = rel_error(fn(*args, **kwargs), out)
    if not again <= tol:
        raise WrongResult(f"two calls on the same inputs differ: relative error {again:.3g} "
                          f"above {tol:g}")
    info = {"check": "repeat", "repeat_rel_error": again}
    itemsize = max((t.element_size() for t in tensors(args)), default=4)
    if nbytes * 8 / itemsize <= F64_CHECK_MAX_BYTES and dtype_name != "float64":
        twin = _float64(fn, args)
        if twin is not None:
            try:
                ref = twin[0](*twin[1], **kwargs)
            except Exception as exc:  # an op without float64 on this device: the repeat stands
                info["float64_skipped"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            else:
                err = rel_error(out, ref)
                if not err <= tol:
                    raise WrongResult(f"relative error {err:.3g} against float64 above {tol:g}")
                return err, info | {"check": "float64"}
    return again, info
