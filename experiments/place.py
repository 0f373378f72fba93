"""Place any callable on the device's fitted roofline: time it, count its work, check it.

    python -m experiments place experiments.workloads:make_mlp --device cuda:0 --dtype bfloat16
    python -m experiments place path/to/my_model.py:make_model --batch 8 --profile --ncu

    from experiments.place import place
    row = place(model, x, device="cuda:0", dtype="bfloat16", ceilings="results/roofline/ceilings.parquet")

A target `module:function` (or `path/to/file.py:function`) is a *factory* when its name starts
with `make_` (or it has `rooflab_factory = True`): make(batch, dtype, device, generator, **kwargs)
-> (fn, args), see experiments/workloads/. The command line needs a factory (it must build the
inputs); place() takes the callable and its tensors directly.

Work is counted, never derived from the timing: FLOPs by torch.utils.flop_counter.FlopCounterMode
(matmuls, convolutions, attention; elementwise ops, norms and softmax count 0), bytes as the
compulsory traffic: every input tensor, every parameter and buffer reachable from fn (an nn.Module,
or a partial, bound method or closure holding one), and every output, each moved once. The call
is timed by the core timer (experiments/core/timer.py) replayed from a CUDA graph where it can be
captured (`timer` cuda_event_graph), else as eager launches (cuda_event); its output is checked
finite, two calls must agree, and where a float64 copy can run, against float64.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import functools
import importlib
import importlib.util
import io
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from torch.utils import flop_counter
from torch.utils._pytree import tree_leaves, tree_map

from .core.runner import NotApplicable, WrongResult

FACTORY_PREFIX = "make_"
# Relative error (output norm) a correct call stays under: against float64 of the same inputs,
# and between two calls on the same inputs (atomics may reorder sums).
TOLERANCE = {"float64": 1e-10, "float32": 1e-4, "tf32": 1e-2, "float16": 1e-2, "bfloat16": 5e-2,
             "float8_e4m3": 2e-1}
F64_CHECK_MAX_BYTES = 2 << 30  # a float64 copy of the work's operands larger than this: skipped
DEFAULT_CEILINGS = "results/roofline/ceilings.parquet"
NCU_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum",
               "l1tex__t_bytes.sum")


class TargetError(ValueError):
    """A target that cannot be imported or is not a callable; the message says which and why."""


# ---- targets ----------------------------------------------------------------------------------

def load_target(spec: str):
    """The object `module:function` or `path/to/file.py:function` names."""
    where, sep, attr = spec.rpartition(":")
    if not sep or not where or not attr:
        raise TargetError(f"target {spec!r}: give module:function or path/to/file.py:function")
    try:
        if where.endswith(".py") or os.sep in where:
            path = Path(where)
            if not path.is_file():
                raise TargetError(f"target {spec!r}: no file {path}")
            name = f"rooflab_user_{abs(hash(str(path.resolve())))}"
            mod_spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[name] = module  # dataclasses and pickling look modules up by name
            mod_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except TargetError:
        raise
    except Exception as exc:  # ImportError, or the module raising while it loads
        raise TargetError(f"target {spec!r}: cannot import {where!r}: "
                          f"{type(exc).__name__}: {exc}") from None
    if not hasattr(module, attr):
        makers = sorted(n for n in dir(module) if n.startswith(FACTORY_PREFIX))
        raise TargetError(f"target {spec!r}: {where!r} has no {attr!r}"
                          + (f"; its factories: {makers}" if makers else ""))
    obj = getattr(module, attr)
    if not callable(obj):
        raise TargetError(f"target {spec!r} is a {type(obj).__name__}, not a callable")
    return obj


def is_factory(obj) -> bool:
    return bool(getattr(obj, "rooflab_factory", False)) or getattr(
        obj, "__name__", "").startswith(FACTORY_PREFIX)


def build(factory, batch: int, dtype: torch.dtype, device, generator, kwargs: dict):
    """(fn, args) from a factory, checked to be what the convention says."""
    made = factory(batch, dtype, device, generator, **(kwargs or {}))
    if not (isinstance(made, (tuple, list)) and len(made) == 2 and callable(made[0])):
        raise TypeError(f"factory {getattr(factory, '__name__', factory)} returned "
                        f"{type(made).__name__}; it must return (fn, args)")
    fn, args = made
    args = (args,) if isinstance(args, torch.Tensor) else tuple(args)
    return fn, args


# ---- counting ---------------------------------------------------------------------------------

def tensors(obj) -> list[torch.Tensor]:
    return [t for t in tree_leaves(obj) if isinstance(t, torch.Tensor)]


def _cpu_attention_flops(q, k, v, *args, out_shape=None, **kwargs):
    return flop_counter.sdpa_flop_count(q, k, v)


# FlopCounterMode has torch's SDPA formula for the GPU kernels but no entry for the CPU one:
# the same formula, registered for it.
# FlopCounterMode wraps its custom mapping in shape_wrapper itself; the recorder below does not.
def _custom_mapping(wrap: bool = False) -> dict:
    op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    fn = flop_counter.shape_wrapper(_cpu_attention_flops) if wrap else _cpu_attention_flops
    return {op: fn} if op is not None else {}


def count_flops(fn, args, kwargs=None) -> tuple[float, dict]:
    """(FLOPs of one call, FLOPs per aten op) by FlopCounterMode."""
    with flop_counter.FlopCounterMode(display=False, custom_mapping=_custom_mapping()) as fc:
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


def _nbytes(ts) -> float:
    """Bytes of distinct tensors (one tensor passed twice, or tied weights, count once)."""
    unique = {(t.data_ptr(), t.numel(), t.dtype): t for t in ts}
    return float(sum(t.numel() * t.element_size() for t in unique.values()))


def count_bytes(fn, args, kwargs, out) -> dict:
    """Compulsory bytes: inputs read once, reachable weights read once, outputs written once."""
    inputs = tensors((args, kwargs or {}))
    keys = {(t.data_ptr(), t.numel(), t.dtype) for t in inputs}
    weights = [t for t in reachable_tensors(fn) if (t.data_ptr(), t.numel(), t.dtype) not in keys]
    parts = {"input_bytes": _nbytes(inputs), "param_bytes": _nbytes(weights),
             "output_bytes": _nbytes(tensors(out))}
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


# ---- checking ---------------------------------------------------------------------------------

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


# ---- timing -----------------------------------------------------------------------------------

def time_calls(ctx, calls: list, kwargs=None) -> dict:
    """Time the calls in turn (copies rotate so a point is not timed hot in cache), replayed from
    a CUDA graph whatever their length when they can be captured, else eager launches."""
    kwargs = kwargs or {}
    n = len(calls)
    return ctx.time(lambda i: calls[i % n][0](*calls[i % n][1], **kwargs), force_graph=True)


def measure(ctx, fn, args, kwargs=None, calls=None) -> dict:
    """Count, check and time fn(*args): the row fields (raises as count and check do)."""
    with precision(ctx.dtype):
        counts = count(fn, args, kwargs)
        err, info = check(fn, args, kwargs, ctx.dtype, counts["bytes"])
        stats = time_calls(ctx, calls or [(fn, args)], kwargs)
    return row_fields(counts, stats, err, info)


def row_fields(counts: dict, stats: dict, err: float, info: dict) -> dict:
    params = {k: v for k, v in counts.items() if k not in ("flops", "bytes")}
    params |= info | {"flop_counter": "FlopCounterMode", "bytes_counted": "compulsory",
                      "graph": stats.get("timer") == "cuda_event_graph"}
    return stats | {"flops": counts["flops"], "bytes": counts["bytes"],
                    "working_set_bytes": int(counts["bytes"]), "rel_error": err,
                    "check_passed": True, "params": params}


# ---- placing ----------------------------------------------------------------------------------

def read_ceilings(ceilings):
    """A ceilings table from a DataFrame, a path, or None (the default path, if it exists)."""
    import pandas as pd

    if ceilings is None:
        ceilings = DEFAULT_CEILINGS if Path(DEFAULT_CEILINGS).is_file() else None
    if ceilings is None or isinstance(ceilings, pd.DataFrame):
        return ceilings
    if not Path(ceilings).is_file():
        return None
    return pd.read_parquet(ceilings)


def find_system(ceilings, device_name: str, host: str | None = None, system: str | None = None):
    """The ceilings' system for this device: named, else this host's fit of the device's model
    (this run's first), else another machine's fit of the same model (a published set)."""
    if ceilings is None or ceilings.empty:
        return None
    if system:
        return system if system in set(ceilings.system) else None
    same = ceilings[(ceilings.device_name == device_name) & ceilings.value.notna()]
    if same.empty:
        return None
    order = same.assign(mine=(same.host == host).astype(int) * 2 + (same.source == "run"))
    return order.sort_values("mine", ascending=False, kind="stable").system.iloc[0]


def no_roofline(device: str) -> str:
    return (f"no fitted roofline for {device} yet: run `snakemake --cores all` (or "
            f"`snakemake --cores all --config 'devices=[\"{device}\"]'` for this device alone) "
            "to measure it, then pass --ceilings results/roofline/ceilings.parquet")


def place(fn, *args, device=None, dtype=None, ceilings=None, name=None, system=None,
          point_budget_s: float = 0.5, **kwargs) -> dict:
    """Time, count and check fn(*args, **kwargs), and place it on the roofline fitted for its
    device. Returns the row (the one schema's fields, `params` a dict) plus the placement
    (experiments.analysis.workloads.place_row: attained FLOP/s, roof, fraction, bound, predicted
    and measured time); without fitted ceilings for the device, `placement_note` says how to get
    them. The inputs are not rotated: a call whose data fits in cache is timed hot."""
    import socket

    from .analysis.workloads import place_row
    from .core.device import device_facts
    from .core.runner import Context

    found = tensors((args, kwargs)) + reachable_tensors(fn)
    dev = torch.device(device) if device else (found[0].device if found else torch.device("cpu"))
    if dtype is None:
        floats = [t.dtype for t in found if t.is_floating_point()]
        dtype = str(floats[0]).removeprefix("torch.") if floats else "float32"
    facts = device_facts(dev)
    ctx = Context(device=dev, dtype=dtype, facts=facts, point_budget_s=point_budget_s)
    row = {"experiment": "workload", "op": name or getattr(fn, "__name__", type(fn).__name__),
           "device": str(dev), "device_kind": dev.type, "device_name": facts.name,
           "dtype": dtype, "host": socket.gethostname()}
    row = ctx.point(row, lambda: measure(ctx, fn, args, kwargs))
    table = read_ceilings(ceilings)
    chosen = find_system(table, facts.name, row["host"], system)
    if row["status"] == "ok" and chosen:
        row |= place_row(row, table, chosen)
    elif row["status"] == "ok":
        row["placement_note"] = no_roofline(str(dev))
    return row


# ---- per operation: torch.profiler ------------------------------------------------------------

class _OpRecorder(torch.utils._python_dispatch.TorchDispatchMode):
    """Each aten op one call runs, with its compulsory bytes (its tensor inputs and outputs,
    exact dtypes) and FLOPs (torch's flop formulas, the registry FlopCounterMode uses)."""

    def __init__(self):
        super().__init__()
        self.ops = []
        self.formulas = flop_counter.flop_registry | _custom_mapping(wrap=True)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        flops = self.formulas[packet](*args, **kwargs, out_val=out) if packet in self.formulas else 0
        ins = tensors((args, kwargs))
        self.ops.append({"op": op_name(func), "flops": float(flops),
                         "input_shapes": shapes_key(ins),
                         "bytes": _nbytes(ins) + _nbytes(tensors(out))})
        return out


def op_name(func) -> str:
    """The name torch.profiler gives an aten op ('aten::add', not the overload 'aten::add.Tensor')."""
    return func._overloadpacket._qualified_op_name


def shapes_key(ins) -> str:
    """Input shapes as torch.profiler records them, which leaves out 0-d (scalar) arguments."""
    return str([list(t.shape) for t in ins if t.dim()])


class _NvtxOps(torch.utils._python_dispatch.TorchDispatchMode):
    """Each aten op inside an NVTX range named `op|input shapes`: ncu renames the kernels it
    launches after it (--print-nvtx-rename kernel), so kernels join the profiler's ops. Ops run
    with the mode popped, so ranges never nest."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        torch.cuda.nvtx.range_push(f"{op_name(func)}|{shapes_key(tensors((args, kwargs)))}")
        try:
            return func(*args, **kwargs)
        finally:
            torch.cuda.nvtx.range_pop()


def profile_ops(fn, args, kwargs=None, device=None, calls: int = 3):
    """Per aten op: time on the device per call (torch.profiler; self time, so a composite op's
    kernels sit with the op that launched them), FLOPs (profiler's, else torch's formula) and
    compulsory bytes of its own inputs and outputs. Ops of no device time are left out."""
    import pandas as pd
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    kwargs = kwargs or {}
    dev = torch.device(device) if device else tensors(args)[0].device
    recorder = _OpRecorder()
    with recorder:
        fn(*args, **kwargs)
    work = pd.DataFrame(recorder.ops, columns=["op", "flops", "input_shapes", "bytes"])
    work = work.groupby(["op", "input_shapes"], as_index=False).agg(
        flops=("flops", "sum"), bytes=("bytes", "sum"), calls=("op", "size"))
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    fn(*args, **kwargs)  # warm: first calls pick kernels and allocate
    with profile(activities=activities, record_shapes=True, with_flops=True) as prof:
        for _ in range(calls):
            fn(*args, **kwargs)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    rows = []
    for evt in prof.key_averages(group_by_input_shape=True):
        if evt.device_type != DeviceType.CPU or not evt.key.startswith("aten::"):
            continue  # a kernel's own event (its time is its op's already), or the profiler's
        self_us = (getattr(evt, "self_device_time_total", None) if dev.type == "cuda"
                   else evt.self_cpu_time_total) or 0.0
        if self_us <= 0:
            continue
        shapes = str([s for s in (evt.input_shapes or []) if s])
        rows.append({"op": evt.key, "input_shapes": shapes, "time_s": self_us / 1e6 / calls,
                     "profiler_flops": (evt.flops or 0) / calls})
    timed = pd.DataFrame(rows, columns=["op", "input_shapes", "time_s", "profiler_flops"])
    ops = timed.merge(work, on=["op", "input_shapes"], how="left")
    ops["flops"] = ops.profiler_flops.where(ops.profiler_flops > 0, ops.flops)
    ops["flops_source"] = ["torch.profiler" if p > 0 else "flop formula" if f == f else "none"
                           for p, f in zip(ops.profiler_flops, ops.flops)]
    ops["intensity"] = ops.flops / ops.bytes
    ops["flop_per_s"] = ops.flops / ops.time_s
    ops["byte_per_s"] = ops.bytes / ops.time_s
    return ops.drop(columns="profiler_flops").sort_values("time_s", ascending=False,
                                                          ignore_index=True)


# ---- per kernel: Nsight Compute ---------------------------------------------------------------

_UNITS = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
          "kibyte": 1024, "mibyte": 1024 ** 2, "gibyte": 1024 ** 3, "": 1}


def parse_ncu_csv(text: str):
    """Per kernel launch: name and each metric in bytes, from `ncu --csv` (the details page:
    one line per kernel and metric, columns "ID", "Kernel Name", "Metric Name", "Metric Unit",
    "Metric Value"). Lines before the header (==PROF== messages, the program's output) are
    skipped; values may carry thousands separators and scaled units (Kbyte, Mbyte ...)."""
    import pandas as pd

    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no ncu CSV header (a line starting with \"ID\") in the output")
    kernels: dict = {}
    for rec in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if not rec.get("Metric Name"):
            continue
        unit = (rec.get("Metric Unit") or "").strip().lower()
        value = (rec.get("Metric Value") or "").replace(",", "").strip()
        try:
            number = float(value) * _UNITS[unit]
        except (ValueError, KeyError):
            number = math.nan
        k = kernels.setdefault(rec["ID"], {"id": int(rec["ID"]), "kernel": rec.get("Kernel Name")})
        k[rec["Metric Name"]] = number
    cols = ["id", "kernel", *NCU_METRICS]
    return pd.DataFrame(list(kernels.values())).reindex(columns=cols)


def run_ncu(target: str, device: str, dtype: str, batch: int, kwargs: dict):
    """Profile one call of the target's function under Nsight Compute (clocks left as they are,
    so the counts match what the timer saw); per kernel DRAM read/write, L2 and L1 bytes."""
    ncu = shutil.which("ncu")
    if ncu is None:
        return None
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--print-units",
           "base", "--nvtx", "--print-nvtx-rename", "kernel", "--csv", "--metrics",
           ",".join(NCU_METRICS), sys.executable, "-m",
           "experiments", "place", target, "--device", device, "--dtype", dtype, "--batch",
           str(batch), "--kwargs", json.dumps(kwargs), "--ncu-child"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"ncu exited {proc.returncode}: {(proc.stderr or proc.stdout)[-800:]}")
    return parse_ncu_csv(proc.stdout)


def _ncu_child(factory, args) -> None:
    """Inside ncu: one warm call, then the profiled one between cudaProfilerStart and Stop."""
    from .core.dtypes import torch_dtype

    dev = torch.device(args.device)
    gen = torch.Generator(device=dev).manual_seed(0)
    fn, fargs = build(factory, args.batch, torch_dtype(args.dtype), dev, gen, args.kwargs)
    with precision(args.dtype):
        fn(*fargs)
        torch.cuda.synchronize(dev)
        torch.cuda.cudart().cudaProfilerStart()
        with _NvtxOps():
            fn(*fargs)
        torch.cuda.synchronize(dev)
        torch.cuda.cudart().cudaProfilerStop()


NCU_LEVELS = {"dram_bytes": ("dram__bytes_read.sum", "dram__bytes_write.sum"),
              "l2_bytes": ("lts__t_bytes.sum",), "l1_bytes": ("l1tex__t_bytes.sum",)}


def _nvtx_name(name: str) -> tuple[str, str]:
    """(op, input shapes) from a kernel ncu renamed after its range: "aten::addmm|[[64], [64,
    256]]/nvjet_..." (range, then the kernel's own name); a kernel outside every range: (its
    name, "")."""
    at, bar = name.find("aten::"), name.find("|")
    if at < 0 or bar < at:
        return name, ""
    depth = 0
    for end in range(bar + 1, len(name)):  # the shapes are one bracketed list: find its end
        depth += {"[": 1, "]": -1}.get(name[end], 0)
        if depth == 0:
            return name[at:bar], name[bar + 1:end + 1]
    return name[at:bar], name[bar + 1:]


def ncu_by_op(kernels):
    """Per aten op (the NVTX range ncu named its kernels after): DRAM, L2 and L1 bytes measured
    over its kernels, and how many kernels it launched. Kernels outside any range keep their
    own name as the op."""
    import pandas as pd

    if kernels is None or kernels.empty:
        return pd.DataFrame(columns=["op", "input_shapes", *NCU_LEVELS, "kernels"])
    k = kernels.copy()
    named = [_nvtx_name(str(n)) for n in k.kernel.fillna("")]
    k["op"] = [op for op, _ in named]
    k["input_shapes"] = [shapes for _, shapes in named]
    for level, metrics in NCU_LEVELS.items():
        k[level] = k[list(metrics)].sum(axis=1, min_count=len(metrics))
    # an op's level is measured only if every one of its kernels reported it
    whole = lambda v: v.sum() if v.notna().all() else math.nan  # noqa: E731
    return k.groupby(["op", "input_shapes"], as_index=False).agg(
        **{level: (level, whole) for level in NCU_LEVELS}, kernels=("kernel", "size"))


def op_rows(ops, workload: str, batch: int, ncu_ops=None) -> list[dict]:
    """Rows of the one schema for a workload's aten ops (variant `aten_op`): the profiler's
    device time per call, counted FLOPs and compulsory bytes, and where ncu ran, the DRAM, L2 and
    L1 bytes its kernels moved (params)."""
    if ncu_ops is not None and len(ncu_ops):
        ops = ops.merge(ncu_ops, on=["op", "input_shapes"], how="left")
    rows = []
    for r in ops.to_dict("records"):
        params = {"aten_op": r["op"], "input_shapes": r["input_shapes"],
                  "flops_source": r.get("flops_source"), "calls_per_step": r.get("calls"),
                  "bytes_source": "ncu" if r.get("dram_bytes") == r.get("dram_bytes")
                  and r.get("dram_bytes") is not None else "counted"}
        params |= {level: r[level] for level in (*NCU_LEVELS, "kernels")
                   if r.get(level) == r.get(level) and r.get(level) is not None}
        flops = r["flops"] if r["flops"] == r["flops"] else 0.0
        nbytes = r["bytes"] if r["bytes"] == r["bytes"] else None
        rows.append({"op": workload, "variant": "aten_op", "batch": batch, "flops": flops,
                     "bytes": nbytes, "time_s": r["time_s"], "timer": "torch_profiler",
                     "status": "ok", "params": params,
                     "message": "device self time per call from torch.profiler"})
    return rows


# ---- command line -----------------------------------------------------------------------------

def _fmt(x, unit=""):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, str):
        return x
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1, "")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    if unit == "s":
        for scale, prefix in ((1e-3, "m"), (1e-6, "u"), (1e-9, "n")):
            if abs(x) >= scale:
                return f"{x / scale:.3g} {prefix}s"
    return f"{x:.3g} {unit}".strip()


def print_row(row: dict, file=sys.stdout) -> None:
    msg = row.get("message")
    items = [("status", row.get("status")), ("message", msg if isinstance(msg, str) else ""),
             ("batch", str(row.get("batch"))), ("FLOPs (FlopCounterMode)", _fmt(row.get("flops"))),
             ("bytes (compulsory)", _fmt(row.get("bytes"), "B")),
             ("intensity", _fmt(row.get("intensity"), "FLOP/B")),
             ("time, median", _fmt(row.get("time_s"), "s")), ("timer", row.get("timer") or "-"),
             ("attained", _fmt(row.get("attained_flop_per_s", row.get("flop_per_s")), "FLOP/s")),
             ("bandwidth", _fmt(row.get("attained_byte_per_s", row.get("byte_per_s")), "B/s")),
             ("roof at this intensity", _fmt(row.get("roof_flop_per_s"), "FLOP/s")),
             ("fraction of roof", _fmt(row.get("fraction_of_roof"))),
             ("bound", row.get("bound") or "-"),
             ("predicted time", _fmt(row.get("predicted_time_s"), "s")),
             ("model error (measured/predicted - 1)", _fmt(row.get("model_error"))),
             ("check", f"{row.get('check_passed')} (rel. error {_fmt(row.get('rel_error'))})"),
             ("system", row.get("system") or row.get("placement_note") or "-")]
    width = max(len(k) for k, _ in items)
    print(f"{row.get('op')} on {row.get('device')} ({row.get('device_name')}), {row.get('dtype')}",
          file=file)
    for key, val in items:
        if val:
            print(f"  {key:<{width}}  {val}", file=file)


def parse_args(argv, prog="python -m experiments place"):
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", help="module:make_fn or path/to/file.py:make_fn (a factory)")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--kwargs", type=json.loads, default={}, help="JSON keywords for the factory")
    p.add_argument("--ceilings", default=DEFAULT_CEILINGS)
    p.add_argument("--system", default=None, help="the ceilings' system to place on")
    p.add_argument("--out", default="results/manual/place.parquet")
    p.add_argument("--point-budget-s", type=float, default=0.5)
    p.add_argument("--host", default="")
    p.add_argument("--profile", action="store_true", help="per aten op, with torch.profiler")
    p.add_argument("--ncu", action="store_true", help="per kernel bytes, with Nsight Compute")
    p.add_argument("--ncu-child", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv, prog="python -m experiments place") -> int:
    """`python -m experiments place ...`: the workload experiment for one batch, then placed."""
    import pandas as pd

    from . import workload
    from .config import ConfigError, experiment_config, job_config
    from .core.device import DeviceError, resolve_pool
    from .core.runner import run_job
    from .core.store import read_measurements

    args = parse_args(argv, prog)
    try:
        factory = load_target(args.target)
        if not is_factory(factory):
            raise TargetError(f"target {args.target!r} is not a factory: the command line builds "
                              f"the inputs, so it needs make_*(batch, dtype, device, generator) "
                              f"-> (fn, args) (see experiments/workloads); or call "
                              f"experiments.place.place(fn, *tensors) from Python")
        if args.ncu_child:
            _ncu_child(factory, args)
            return 0
        name = args.target.rpartition(":")[2].removeprefix(FACTORY_PREFIX)
        cfg = experiment_config("workload", workload=name, target=args.target,
                                kwargs=args.kwargs, batches=[args.batch], max_call_s=math.inf)
        job = job_config(cfg, device=args.device, dtype=args.dtype, out=args.out,
                         host=args.host, point_budget_s=args.point_budget_s)
        devs = resolve_pool(job.device)
    except (TargetError, ConfigError, DeviceError, ValueError) as exc:
        print(f"rooflab place: {exc}", file=sys.stderr)
        return 2
    path = run_job(job, workload)
    rows = read_measurements(path).to_pandas()
    table = read_ceilings(args.ceilings)
    from .analysis.workloads import place_row

    status, system = 0, None
    for row in rows.to_dict("records"):
        row["params"] = json.loads(row["params"] or "{}")
        system = find_system(table, row["device_name"], row["host"], args.system)
        if row["status"] == "ok" and system:
            row |= place_row(row, table, system)
        elif row["status"] == "ok":
            row["placement_note"] = no_roofline(row["device"])
        else:
            status = 1
        print_row(row)
    print(f"rows written to {path}")
    dev = devs[0]
    if args.profile and rows.status.eq("ok").any():
        from .core.dtypes import torch_dtype

        gen = torch.Generator(device=dev).manual_seed(0)
        fn, fargs = build(factory, args.batch, torch_dtype(args.dtype), dev, gen, args.kwargs)
        with precision(args.dtype):
            ops = profile_ops(fn, fargs, device=dev)
        if system:
            from .analysis import roofline

            pred = [roofline.predict(table, system, args.dtype, f if f == f else 0.0,
                                     b if b == b else 0.0, graph=False)
                    for f, b in zip(ops.flops, ops.bytes)]
            ops["bound"] = [p["bound"] for p in pred]
            ops["roof_flop_per_s"] = [p["roof_flops"] for p in pred]
            ops["predicted_time_s"] = [p["time_s"] for p in pred]
        ops_path = Path(args.out).with_suffix(".ops.parquet")
        ops.to_parquet(ops_path)
        with pd.option_context("display.width", 200, "display.max_columns", 20):
            print(f"\nper aten op (torch.profiler, {'device' if dev.type == 'cuda' else 'CPU'} "
                  f"self time per call):\n{ops.head(25).to_string()}\nwritten to {ops_path}")
    if args.ncu:
        if dev.type != "cuda":
            print("\n--ncu: Nsight Compute profiles GPU kernels; on a CPU the counted bytes stand")
        elif shutil.which("ncu") is None:
            print("\n--ncu: ncu is not on PATH: the bytes above are counted (compulsory), "
                  "not measured")
        else:
            kernels = run_ncu(args.target, str(dev), args.dtype, args.batch, args.kwargs)
            counted = float(rows.bytes.iloc[0])
            dram = kernels["dram__bytes_read.sum"].sum() + kernels["dram__bytes_write.sum"].sum()
            ncu_path = Path(args.out).with_suffix(".ncu.parquet")
            kernels.to_parquet(ncu_path)
            with pd.option_context("display.width", 200, "display.max_colwidth", 60):
                print(f"\nper kernel (ncu, one call):\n{kernels.to_string()}")
            print(f"DRAM bytes measured {_fmt(dram, 'B')} against {_fmt(counted, 'B')} counted "
                  f"(compulsory): ratio {dram / counted:.3g}; written to {ncu_path}")
    return status
