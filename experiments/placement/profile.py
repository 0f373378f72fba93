"""Per aten op: torch.profiler's device time, FLOPs by torch's formulas, compulsory bytes."""

from __future__ import annotations
import torch

from experiments.placement.counting import custom_flop_mapping, distinct_bytes, tensors
from torch.utils import flop_counter


# the levels Nsight Compute measures bytes at (experiments/placement/ncu.py)
LEVELS = ("dram_bytes", "l2_bytes", "l1_bytes")


class _OpRecorder(torch.utils._python_dispatch.TorchDispatchMode):
    """Each aten op one call runs, with its compulsory bytes (its tensor inputs and outputs,
    exact dtypes) and FLOPs (torch's flop formulas, the registry FlopCounterMode uses)."""

    def __init__(self):
        super().__init__()
        self.ops = []
        self.formulas = flop_counter.flop_registry | custom_flop_mapping(wrap=True)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        flops = self.formulas[packet](*args, **kwargs, out_val=out) if packet in self.formulas else 0
        ins = tensors((args, kwargs))
        self.ops.append({"op": op_name(func), "flops": float(flops),
                         "input_shapes": shapes_key(ins),
                         "bytes": distinct_bytes(ins) + distinct_bytes(tensors(out))})
        return out


def op_name(func) -> str:
    """The name torch.profiler gives an aten op ('aten::add', not the overload 'aten::add.Tensor')."""
    return func._overloadpacket._qualified_op_name


def shapes_key(ins) -> str:
    """Input shapes as torch.profiler records them, which leaves out 0-d (scalar) arguments."""
    return str([list(t.shape) for t in ins if t.dim()])


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
        params |= {level: r[level] for level in (*LEVELS, "kernels")
                   if r.get(level) == r.get(level) and r.get(level) is not None}
        flops = r["flops"] if r["flops"] == r["flops"] else 0.0
        nbytes = r["bytes"] if r["bytes"] == r["bytes"] else None
        rows.append({"op": workload, "variant": "aten_op", "batch": batch, "flops": flops,
                     "bytes": nbytes, "time_s": r["time_s"], "timer": "torch_profiler",
                     "status": "ok", "params": params,
                     "message": "device self time per call from torch.profiler"})
    return rows
