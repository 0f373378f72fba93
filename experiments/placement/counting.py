"""Work counted from definitions, never from the timing: FLOPs per aten op (torch's formulas,
else experiments/placement/formulas.py), bytes as the compulsory traffic (every input, every
reachable parameter and buffer, every output, each moved once) and per op (its tensors in and
out)."""

from __future__ import annotations
import contextlib
import functools
import sys
import torch
from torch.utils import flop_counter
from torch.utils._pytree import tree_leaves
from experiments.placement import formulas, opclass


def tensors(obj) -> list[torch.Tensor]:
    return [t for t in tree_leaves(obj) if isinstance(t, torch.Tensor)]


class OpCounter(torch.utils._python_dispatch.TorchDispatchMode):
    """Each aten op one call runs, with its FLOPs (torch's formula where FlopCounterMode has one,
    else experiments/placement/formulas.py; attention and the fused ops always by the latter, so
    causal masks and fast paths count what runs), the bytes of its own tensors in and out, and
    of those the `cold` ones: inputs the call did not produce itself (weights, the call's inputs),
    which a rotated call reads from DRAM. Views and allocations move nothing and are left out."""

    def __init__(self):
        super().__init__()
        self.ops = []
        self._made = set()  # storages this call's ops wrote
        self.gathered: dict = {}  # a gather's table storage -> bytes of the rows read from it
        self.whole: set = set()  # storages some other op read whole

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func._overloadpacket.__name__
        if func.is_view or name in formulas.NO_WORK:
            return out
        flops, source = op_flops(func, name, args, kwargs, out)
        ins, outs = tensors((args, kwargs)), tensors(out)
        cold = [t for t in ins if _storage(t) not in self._made]
        nbytes, cold_bytes = distinct_bytes(ins) + distinct_bytes(outs), distinct_bytes(cold)
        read = formulas.gathered_bytes(name, args)
        if read is not None:  # a gather reads the rows it names, not the table
            nbytes = read + distinct_bytes(outs)
            cold_bytes = read if _storage(args[0]) not in self._made else 0.0
            key = _storage(args[0])
            self.gathered[key] = self.gathered.get(key, 0.0) + formulas.gathered_rows(name, args)
            self.whole.update(_storage(t) for t in ins[1:])
        else:
            self.whole.update(_storage(t) for t in ins)
        self._made.update(_storage(t) for t in outs)
        self.ops.append({"op": op_name(func, args), "flops": float(flops),
                         "flops_source": source,
                         "kind": "matrix" if name in formulas.MATRIX_OPS else "vector",
                         "input_shapes": shapes_key(ins),
                         "bytes": nbytes, "cold_bytes": cold_bytes,
                         "exponentials": formulas.exponentials(name, args, kwargs)})
        return out


def _storage(t) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001 - a tensor without storage (meta, sparse): never cold
        return id(t)


def op_flops(func, name: str, args, kwargs, out) -> tuple[float, str]:
    """(FLOPs, which formula) of one aten op."""
    packet = func._overloadpacket
    if name not in formulas.OWN and packet in flop_counter.flop_registry:
        return flop_counter.flop_registry[packet](*args, **kwargs, out_val=out), "FlopCounterMode"
    found = formulas.formula(name, args, kwargs, out)
    return (found, "formula") if found is not None else (0.0, "none")


def op_name(func, args=()) -> str:
    """The name torch.profiler gives an aten op ('aten::add', not the overload 'aten::add.Tensor').
    A transposed convolution (aten::convolution with `transposed`, its args[6]) takes the name of
    the op the profiler nests it under, aten::conv_transpose<N>d: its shapes alone read as a plain
    convolution's where c_in == c_out (opclass.conv_variant)."""
    name = func._overloadpacket._qualified_op_name
    if name == opclass.CONVOLUTION and len(args) > 6 and args[6] is True:
        return f"{opclass.CONV_TRANSPOSE}{args[0].dim() - 2}d"
    return name


def shapes_key(ins) -> str:
    """Input shapes as torch.profiler records them, which leaves out 0-d (scalar) arguments."""
    return str([list(t.shape) for t in ins if t.dim()])


def record(fn, args, kwargs=None) -> tuple:
    """(the call's output, the OpCounter that watched it: its ops, the tables it gathered)."""
    counter = OpCounter()
    with counter:
        out = fn(*args, **(kwargs or {}))
    return out, counter


def record_ops(fn, args, kwargs=None):
    """(the call's output, its ops as OpCounter records them)."""
    out, counter = record(fn, args, kwargs)
    return out, counter.ops


def summarize_ops(ops: list[dict]) -> list[list]:
    """The ops grouped by (op, input shapes): [op, input shapes, calls, FLOPs, bytes, cold bytes,
    kind, FLOP source, softmax exponentials], the work a call's prediction sums over (kept in
    the row's params)."""
    groups: dict = {}
    for o in ops:
        g = groups.setdefault((o["op"], o["input_shapes"]), [o["op"], o["input_shapes"], 0, 0.0,
                                                             0.0, 0.0, o["kind"],
                                                             o["flops_source"], 0.0])
        g[2] += 1
        g[3] += o["flops"]
        g[4] += o["bytes"]
        g[5] += o["cold_bytes"]
        g[8] += o["exponentials"]
    return list(groups.values())


def count_flops(fn, args, kwargs=None) -> tuple[float, dict]:
    """(FLOPs of one call, FLOPs per aten op), every op counted (see OpCounter)."""
    _, ops = record_ops(fn, args, kwargs)
    per_op: dict = {}
    for o in ops:
        if o["flops"]:
            per_op[o["op"]] = per_op.get(o["op"], 0) + int(o["flops"])
    return float(sum(o["flops"] for o in ops)), per_op


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


def count_bytes(fn, args, kwargs, out, gathered: dict | None = None) -> dict:
    """Compulsory bytes: inputs read once, reachable weights read once, outputs written once;
    a table only gathers read (`gathered`: its storage -> the bytes of the rows they read, an
    OpCounter's `gathered` less what other ops read whole) counts those rows, at most itself."""
    inputs = tensors((args, kwargs or {}))
    keys = {(t.data_ptr(), t.numel(), t.dtype) for t in inputs}
    weights = [t for t in reachable_tensors(fn) if (t.data_ptr(), t.numel(), t.dtype) not in keys]
    gathered = gathered or {}
    whole = [t for t in weights if _storage(t) not in gathered]
    tables = {_storage(t): min(gathered[_storage(t)], t.numel() * t.element_size())
              for t in weights if _storage(t) in gathered}
    parts = {"input_bytes": distinct_bytes(inputs),
             "param_bytes": distinct_bytes(whole) + float(sum(tables.values())),
             "output_bytes": distinct_bytes(tensors(out))}
    # what one copy holds in memory (whole tables): what a rotation's copies must fit in
    resident = parts["input_bytes"] + distinct_bytes(weights) + parts["output_bytes"]
    return parts | {"bytes": sum(parts.values()), "resident_bytes": resident}


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
    """One call's FLOPs, compulsory bytes and its ops' work; raises TypeError for a call that
    returns no tensor. A call of 0 FLOPs (a gather, a copy) is placed by its bytes alone."""
    out, counter = record(fn, args, kwargs)
    ops = counter.ops
    if not tensors(out):
        raise TypeError(f"the call returned {type(out).__name__}, no tensor: nothing to check "
                        "or count as written")
    per_op: dict = {}
    for o in ops:
        if o["flops"]:
            per_op[o["op"]] = per_op.get(o["op"], 0) + int(o["flops"])
    fused = sorted({o["op"] for o in ops if o["flops_source"] == "formula"
                    and o["kind"] == "matrix"})
    gathered = {k: v for k, v in counter.gathered.items() if k not in counter.whole}
    return count_bytes(fn, args, kwargs, out, gathered) | {"gathered_tables": len(gathered)} | {
        "flops": float(sum(o["flops"] for o in ops)), "flops_per_op": per_op,
        "op_bytes": float(sum(o["bytes"] for o in ops)), "ops": summarize_ops(ops),
        "counted_by_formula": fused}
