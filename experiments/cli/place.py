"""Place any callable on the device's fitted roofline: time it, count its work, check it.

    python -m experiments place experiments.models:make_mlp --device cuda:0 --dtype bfloat16
    python -m experiments place path/to/my_model.py:make_model --batch 8 --profile --ncu

    from experiments.cli.place import place
    row = place(model, x, device="cuda:0", dtype="bfloat16", ceilings="results/roofline/ceilings.parquet")

A target `module:function` (or `path/to/file.py:function`) is a *factory* when its name starts
with `make_` (or it has `rooflab_factory = True`): make(batch, dtype, device, generator, **kwargs)
-> (fn, args), see experiments/models/. The command line needs a factory (it must build the
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
import json
import math
import shutil
import sys
from pathlib import Path
import torch
from experiments.analysis.placements import DEFAULT_CEILINGS, find_system, no_roofline, read_ceilings
from experiments.placement.counting import precision, reachable_tensors, tensors
from experiments.placement.measure import measure
from experiments.placement.ncu import ncu_child, run_ncu
from experiments.placement.profile import profile_ops
from experiments.placement.target import FACTORY_PREFIX, TargetError, build, is_factory, load_target


def place(fn, *args, device=None, dtype=None, ceilings=None, name=None, system=None,
          point_budget_s: float | None = None, **kwargs) -> dict:
    """Time, count and check fn(*args, **kwargs), and place it on the roofline fitted for its
    device. Returns the row (the one schema's fields, `params` a dict) plus the placement
    (experiments.analysis.placements.place_row: attained FLOP/s, roof, fraction, bound, predicted
    and measured time); without fitted ceilings for the device, `placement_note` says how to get
    them. The inputs are not rotated: a call whose data fits in cache is timed hot. Measured by a
    job's rules (config/job.yaml); `point_budget_s` overrides its budget."""
    import socket

    from experiments.analysis.placements import place_row
    from experiments.core.device import device_facts
    from experiments.core.runner import Context

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
    p.add_argument("--point-budget-s", type=float, help="default: config/job.yaml's")
    p.add_argument("--host", default="")
    p.add_argument("--profile", action="store_true", help="per aten op, with torch.profiler")
    p.add_argument("--ncu", action="store_true", help="per kernel bytes, with Nsight Compute")
    p.add_argument("--ncu-child", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)



def main(argv, prog="python -m experiments place") -> int:
    """`python -m experiments place ...`: the workload experiment for one batch, then placed."""
    import pandas as pd

    from experiments import experiment_config, workload
    from experiments.core.config import ConfigError, job_config
    from experiments.core.device import DeviceError, resolve_pool
    from experiments.core.runner import run_job
    from experiments.core.store import read_measurements

    args = parse_args(argv, prog)
    try:
        factory = load_target(args.target)
        if not is_factory(factory):
            raise TargetError(f"target {args.target!r} is not a factory: the command line builds "
                              f"the inputs, so it needs make_*(batch, dtype, device, generator) "
                              f"-> (fn, args) (see experiments/models/); or call "
                              f"experiments.placement.place.place(fn, *tensors) from Python")
        if args.ncu_child:
            ncu_child(factory, args)
            return 0
        name = args.target.rpartition(":")[2].removeprefix(FACTORY_PREFIX)
        cfg = experiment_config("workload", workload=name, target=args.target,
                                kwargs=args.kwargs, batches=[args.batch], max_call_s=math.inf)
        budget = {} if args.point_budget_s is None else {"point_budget_s": args.point_budget_s}
        job = job_config(cfg, device=args.device, dtype=args.dtype, out=args.out,
                         host=args.host, **budget)
        devs = resolve_pool(job.device)
    except (TargetError, ConfigError, DeviceError, ValueError) as exc:
        print(f"rooflab place: {exc}", file=sys.stderr)
        return 2
    path = run_job(job, workload)
    rows = read_measurements(path).to_pandas()
    table = read_ceilings(args.ceilings)
    from experiments.analysis.placements import place_row

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
        from experiments.core.dtypes import torch_dtype

        gen = torch.Generator(device=dev).manual_seed(0)
        fn, fargs = build(factory, args.batch, torch_dtype(args.dtype), dev, gen, args.kwargs)
        with precision(args.dtype):
            ops = profile_ops(fn, fargs, device=dev)
        if system:
            from experiments.analysis import roofline

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

