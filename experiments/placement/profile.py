"""Per aten op: torch.profiler's device time, the op's counted FLOPs and bytes."""

from __future__ import annotations
import torch

from experiments.placement.counting import (op_name, record_ops, shapes_key,  # noqa: F401
                                            summarize_ops, tensors)


# the levels Nsight Compute measures bytes at (experiments/placement/ncu.py)
LEVELS = ("dram_bytes", "l2_bytes", "l1_bytes")


def _profiled_times(prof, counted: set, names: dict, cuda: bool, calls: int) -> tuple:
    """(op, input shapes) -> time per call, and -> GPU kernels per call. Each aten event's self
    time (device time on a GPU) and kernels go to its outermost ancestor the recorder counted (a
    cuDNN kernel under aten::convolution goes to aten::convolution, whose FLOPs and bytes were
    counted); an event with no counted ancestor matches a counted op of its name when that name
    is unique, else is dropped (views, the profiler's own events)."""
    times: dict = {}
    kernels: dict = {}
    for evt in prof.profiler.function_events:
        if not evt.name.startswith("aten::"):
            continue
        own = (evt.self_device_time_total if cuda else evt.self_cpu_time_total) or 0.0
        if own <= 0:
            continue
        key, node = None, evt
        while node is not None:
            if node.name.startswith("aten::"):
                shapes = str([s for s in (node.input_shapes or []) if s])
                if (node.name, shapes) in counted:
                    key = (node.name, shapes)
                elif node is evt and node.name in names:
                    key = names[node.name]
            node = node.cpu_parent
        if key is not None:
            times[key] = times.get(key, 0.0) + own / 1e6 / calls
            launched = len(getattr(evt, "kernels", None) or ())
            kernels[key] = kernels.get(key, 0.0) + launched / calls
    return times, kernels


def profile_ops(fn, args, kwargs=None, device=None, calls: int = 3):
    """Per aten op: time on the device per call (torch.profiler; the time of the kernels an op
    launched, however deep) and, on a GPU, those kernels a call (`profiled_kernels`), FLOPs
    (experiments/placement/counting.py) and the bytes of its own inputs and outputs
    (`cold_bytes`: those the call did not write itself). Views, allocations and the profiler's
    own events are left out."""
    import pandas as pd
    from torch.profiler import ProfilerActivity, profile

    kwargs = kwargs or {}
    dev = torch.device(device) if device else tensors(args)[0].device
    _, recorded = record_ops(fn, args, kwargs)
    work = pd.DataFrame(summarize_ops(recorded), columns=[
        "op", "input_shapes", "calls", "flops", "bytes", "cold_bytes", "kind", "flops_source",
        "exponentials"])
    counted = set(zip(work.op, work.input_shapes))
    counts = work.op.value_counts()
    names = {op: (op, shapes) for op, shapes in counted if counts[op] == 1}
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    fn(*args, **kwargs)  # warm: first calls pick kernels and allocate
    with profile(activities=activities, record_shapes=True) as prof:
        for _ in range(calls):
            fn(*args, **kwargs)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    times, kernels = _profiled_times(prof, counted, names, dev.type == "cuda", calls)
    work["time_s"] = [times.get(k, 0.0) for k in zip(work.op, work.input_shapes)]
    # the kernels each op launched a step (the call's launches, rounded)
    work["profiled_kernels"] = [round(kernels.get(k, 0.0)) for k in zip(work.op, work.input_shapes)]
    ops = work[work.time_s > 0].copy()
    ops["intensity"] = ops.flops / ops.bytes
    ops["flop_per_s"] = ops.flops / ops.time_s
    ops["byte_per_s"] = ops.bytes / ops.time_s
    return ops.sort_values("time_s", ascending=False, ignore_index=True)


def with_kernels(call_ops: list | None, ops) -> None:
    """Append to each of a call's counted ops ([op, shapes, ..., exponentials], counting.py) the
    GPU kernels the profiler saw it launch a call, where it saw any: the op model's floor counts
    them (analysis/prediction.py)."""
    launched = dict(zip(zip(ops.op, ops.input_shapes), ops.profiled_kernels))
    for o in call_ops or ():
        if len(o) == 9 and launched.get((o[0], o[1])):
            o.append(int(launched[(o[0], o[1])]))


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
                  "kind": r.get("kind"), "cold_bytes": r.get("cold_bytes"),
                  "exponentials": r.get("exponentials"),
                  "bytes_source": "ncu" if r.get("dram_bytes") == r.get("dram_bytes")
                  and r.get("dram_bytes") is not None else "counted"}
        params |= {level: r[level] for level in (*LEVELS, "kernels")
                   if r.get(level) == r.get(level) and r.get(level) is not None}
        if "kernels" not in params and r.get("profiled_kernels"):  # ncu's count, else this
            params["kernels"] = int(r["profiled_kernels"])
        flops = r["flops"] if r["flops"] == r["flops"] else 0.0
        nbytes = r["bytes"] if r["bytes"] == r["bytes"] else None
        rows.append({"op": workload, "variant": "aten_op", "batch": batch, "flops": flops,
                     "bytes": nbytes, "time_s": r["time_s"], "timer": "torch_profiler",
                     "status": "ok", "params": params,
                     "message": "device self time per call from torch.profiler"})
    return rows
