"""Work counted from definitions, never from the timing: FLOPs by torch's FlopCounterMode,
bytes as the compulsory traffic (every input, every reachable parameter and buffer, every output,
each moved once)."""

from __future__ import annotations
import contextlib
import functools
import sys
import torch
from torch.utils import flop_counter
from torch.utils._pytree import tree_leaves
from experiments.core.runner import NotApplicable


def tensors(obj) -> list[torch.Tensor]:
    return [t for t in tree_leaves(obj) if isinstance(t, torch.Tensor)]


def _cpu_attention_flops(q, k, v, *args, out_shape=None, **kwargs):
    return flop_counter.sdpa_flop_count(q, k, v)


# FlopCounterMode has torch's SDPA formula for the GPU kernels but no entry for the CPU one:
# the same formula, registered for it.
# FlopCounterMode wraps its custom mapping in shape_wrapper itself; the recorder below does not.
def custom_flop_mapping(wrap: bool = False) -> dict:
    op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    fn = flop_counter.shape_wrapper(_cpu_attention_flops) if wrap else _cpu_attention_flops
    return {op: fn} if op is not None else {}


def count_flops(fn, args, kwargs=None) -> tuple[float, dict]:
    """(FLOPs of one call, FLOPs per aten op) by FlopCounterMode."""
    with flop_counter.FlopCounterMode(display=False, custom_mapping=custom_flop_mapping()) as fc:
        fn(*args, **(kwargs or {}))
    per_op = {str(op): int(n) for op, n in fc.get_flop_counts().get("Global", {}).items() if n}
    return float(fc.get_total_flops()), per_op


def reachable_tensors(obj, depth: int = 3, seen=None) -> list[torch.Tensor]:
    """Parameters, buffers and tensors fn holds: an nn.Module, a partial's arguments, a bound
    method's object, a closure's cells (a few levels down)."""
    seen = set() if seen is None else seen
    if depth < 0 or id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, torch.nn.Module):
        return list(obj.parameters()) + list(obj.buffers())
    found = []
    children = []
    if isinstance(obj, functools.partial):
        children = [obj.func, *obj.args, *obj.keywords.values()]
    elif hasattr(obj, "__self__") and not isinstance(obj.__self__, type(sys)):
        children = [obj.__self__]
    if getattr(obj, "__closure__", None):
        children += [c.cell_contents for c in obj.__closure__ if _filled(c)]
    if isinstance(obj, (list, tuple)):
        children += list(obj)
    elif isinstance(obj, dict):
        children += list(obj.values())
    for child in children:
        found += reachable_tensors(child, depth - 1, seen)
    return found


def _filled(cell) -> bool:
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False


def distinct_bytes(ts) -> float:
    """Bytes of distinct tensors (one tensor passed twice, or tied weights, count once)."""
    unique = {(t.data_ptr(), t.numel(), t.dtype): t for t in ts}
    return float(sum(t.numel() * t.element_size() for t in unique.values()))


def count_bytes(fn, args, kwargs, out) -> dict:
    """Compulsory bytes: inputs read once, reachable weights read once, outputs written once."""
    inputs = tensors((args, kwargs or {}))
    keys = {(t.data_ptr(), t.numel(), t.dtype) for t in inputs}
    weights = [t for t in reachable_tensors(fn) if (t.data_ptr(), t.numel(), t.dtype) not in keys]
    parts = {"input_bytes": distinct_bytes(inputs), "param_bytes": distinct_bytes(weights),
             "output_bytes": distinct_bytes(tensors(out))}
    return parts | {"bytes": sum(parts.values())}


@contextlib.contextmanager
def precision(dtype_name: str):
    """float32 means IEEE float32 (TF32 off for matmuls and cuDNN convolutions); tf32 on."""
    on = dtype_name == "tf32"
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = on
    try:
        with torch.no_grad():  # a forward pass: no autograd graph kept (or timed)
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def count(fn, args, kwargs=None) -> dict:
    """One call's FLOPs and compulsory bytes; raises for a call that returns no tensor (TypeError)
    or counts no FLOPs (NotApplicable: its intensity is undefined)."""
    out = fn(*args, **(kwargs or {}))
    if not tensors(out):
        raise TypeError(f"the call returned {type(out).__name__}, no tensor: nothing to check "
                        "or count as written")
    flops, per_op = count_flops(fn, args, kwargs)
    if flops <= 0:
        raise NotApplicable("FlopCounterMode counts 0 FLOPs (it counts matmuls, convolutions "
                            "and attention, not elementwise ops): the intensity is undefined; "
                            "time it with the bandwidth experiment's ops instead")
    return count_bytes(fn, args, kwargs, out) | {"flops": flops, "flops_per_op": per_op}
