"""`place` after its arguments parsed (experiments/cli/place.py): torch and the rest load here."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
import sys
import traceback
import warnings
from pathlib import Path

from experiments.analysis.units import MISSING, finite, num, qty, share, words


# what the terminal says about a timing, with the numbers (the row's flags are the runner's)
NOISY_CV = 0.05


def print_row(row: dict, file=sys.stdout) -> None:
    print(f"{row.get('op')} on {row.get('device')} ({row.get('device_name')}), {row.get('dtype')}",
          file=file)
    if row.get("status") != "ok":
        print(f"  status   {row.get('status')}\n  message  {row.get('message')}", file=file)
        return
    msg, rel = row.get("message"), row.get("rel_error")
    items = [("status", row.get("status")), ("message", msg if isinstance(msg, str) else ""),
             ("batch", str(row.get("batch"))), ("FLOPs (counted)", qty(row.get("flops"))),
             ("bytes (compulsory)", qty(row.get("bytes"), "B")),
             ("intensity", qty(row.get("intensity"), "FLOP/B")),
             ("time, median", qty(row.get("time_s"), "s")),
             ("timer", words(row.get("timer") or MISSING)),
             ("attained", qty(row.get("attained_flop_per_s", row.get("flop_per_s")), "FLOP/s")),
             ("bandwidth", qty(row.get("attained_byte_per_s", row.get("byte_per_s")), "B/s")),
             ("roof at this intensity", qty(row.get("roof_flop_per_s"), "FLOP/s")),
             ("fraction of roof", share(row.get("fraction_of_roof"))),
             ("bound", row.get("bound") or MISSING),
             ("level", row.get("level") or MISSING),
             ("predicted time", qty(row.get("predicted_time_s"), "s")
              + (f" ({row['predicted_from']})" if row.get("predicted_from") else "")),
             ("model error (measured/predicted - 1)", num(row.get("model_error"))),
             ("failed term", row.get("failed_term") or ""),
             ("check", f"{row.get('check_passed')}"
              + (f" (rel. error {num(rel)})" if finite(rel) else "")),
             ("system", row.get("system") or row.get("placement_note") or MISSING)]
    width = max(len(k) for k, _ in items)
    for key, val in items:
        if val:
            print(f"  {key:<{width}}  {val}", file=file)


def _quiet_cuda_probe():
    """A CPU-only machine (a CUDA build without a driver) warns when CUDA is probed: the
    probe's answer is all we need."""
    warnings.filterwarnings("ignore", message=".*CUDA initialization.*")
    warnings.filterwarnings("ignore", message=".*gpuGetDeviceCount.*")
    warnings.filterwarnings("ignore", message=".*cudaGetDeviceCount.*")


def _auto_device(name: str) -> str:
    """auto: the first GPU when torch has CUDA and sees one, else the CPU, without touching CUDA
    on a build that has none."""
    import torch

    if name != "auto":
        return name
    if not torch.backends.cuda.is_built():
        return "cpu"
    return "cuda:0" if torch.cuda.is_available() else "cpu"


class _OneLine(logging.Handler):
    """The runner's log as one line each: a lock wait says who holds it; a failed point is
    reported by `place` itself (with its traceback), not as the runner's dict."""

    def emit(self, record):
        msg = record.getMessage()
        if "waiting" in msg:
            print(f"rooflab place: {msg}", file=sys.stderr, flush=True)


def user_traceback(factory, args) -> str:
    """Run the user's factory and call once more, outside the runner, to show where it raised:
    the traceback's frames outside rooflab, then the cause in one line."""
    import torch

    from experiments.core.dtypes import torch_dtype
    from experiments.placement.counting import precision
    from experiments.placement.target import build

    try:
        dev = torch.device(args.device)
        gen = torch.Generator(device=dev).manual_seed(0)
        fn, fargs = build(factory, args.batch, torch_dtype(args.dtype), dev, gen, args.kwargs)
        with precision(args.dtype):
            fn(*fargs)
    except Exception as exc:  # noqa: BLE001 - the user's error, shown
        frames = [f for f in traceback.extract_tb(exc.__traceback__)
                  if "/experiments/" not in f.filename.replace("\\", "/")
                  or "/experiments/models/" in f.filename]
        where = frames[-1] if frames else None
        text = "".join(traceback.format_list(frames))
        cause = f"{type(exc).__name__}: {exc}".splitlines()[0]
        at = f" ({Path(where.filename).name}:{where.lineno}, in {where.name})" if where else ""
        return f"Traceback (most recent call last):\n{text}cause: {cause}{at}"
    return ""


def timing_warnings(row: dict) -> list[str]:
    """Lines that say the time is not to be trusted, with the numbers."""
    out = []
    cv, n = row.get("cv"), row.get("samples")
    spread = (f"median {qty(row.get('time_s'), 's')}, 10-90 % {qty(row.get('time_s_q10'), 's')}"
              f" to {qty(row.get('time_s_q90'), 's')}")
    if row.get("noisy") or (cv == cv and cv is not None and cv > NOISY_CV):
        out.append(f"warning: the timing was noisy: {spread}, spread (cv) {share(cv)} over "
                   f"{n} samples; run again on a quieter machine")
    if row.get("contended"):
        other, steal = row.get("other_cpu_share"), row.get("steal_share")
        off = row.get("team_off_cpu_share")
        out.append(f"warning: the CPU was contended while timing: other processes used "
                   f"{share(other or 0.0)} of it"
                   + (f", the hypervisor stole {share(steal)}" if steal else "")
                   + (f", a team thread was off its CPU {share(off)} of the time" if off else "")
                   + f" ({spread})")
    return out


def op_table(ops) -> str:
    """The per-op breakdown as a readable table (units, widest time first)."""
    cols = [("op", "op"), ("shapes", "input shapes"), ("calls", "n"), ("time", "time/call"),
            ("flops", "FLOPs"), ("bytes", "bytes"), ("intensity", "FLOP/B"), ("bound", "bound"),
            ("predicted", "predicted")]
    rows = []
    for r in ops.to_dict("records"):
        shapes = str(r["input_shapes"])
        rows.append({"op": str(r["op"]).removeprefix("aten::"),
                     "shapes": shapes if len(shapes) <= 40 else shapes[:37] + "...",
                     "calls": str(int(r.get("calls") or 1)), "time": qty(r["time_s"], "s"),
                     "flops": qty(r["flops"]) if r["flops"] else "0",
                     "bytes": qty(r["bytes"], "B"),
                     "intensity": num(r["intensity"]), "bound": r.get("bound") or MISSING,
                     "predicted": qty(r.get("predicted_time_s"), "s")})
    widths = {k: max([len(h)] + [len(r[k]) for r in rows]) for k, h in cols}
    lines = ["  ".join(h.ljust(widths[k]) for k, h in cols)]
    lines += ["  ".join(r[k].ljust(widths[k]) for k, _ in cols) for r in rows]
    return "\n".join(lines)


def run(args, prog: str) -> int:
    _quiet_cuda_probe()
    logging.getLogger("experiments").addHandler(_OneLine())
    logging.getLogger("experiments").setLevel(logging.INFO)
    logging.getLogger("experiments").propagate = False
    logging.getLogger("rooflab").setLevel(logging.ERROR)  # a failed point: shown below instead
    import torch

    from experiments import workload
    from experiments.analysis.placements import place_row
    from experiments.analysis.systems import find_system, no_roofline, read_ceilings
    from experiments import experiment_config
    from experiments.core.config import ConfigError, job_config
    from experiments.core.device import DeviceError, JobDevice
    from experiments.core.runner import run_job
    from experiments.core.store import read_measurements
    from experiments.placement.counting import precision
    from experiments.placement.ncu import ncu_child, run_ncu
    from experiments.placement.profile import profile_ops
    from experiments.placement.target import FACTORY_PREFIX, TargetError, build, is_factory, \
        load_target

    try:
        factory = load_target(args.target)
        if not is_factory(factory):
            raise TargetError(f"target {args.target!r} is not a factory: the command line builds "
                              f"the inputs, so it needs make_*(batch, dtype, device, generator) "
                              f"-> (fn, args) (see experiments/models/); or call "
                              f"experiments.cli.place.place(fn, *tensors) from Python")
        if args.ncu_child:
            ncu_child(factory, args)
            return 0
        args.device = _auto_device(args.device)
        name = args.target.rpartition(":")[2].removeprefix(FACTORY_PREFIX)
        cfg = experiment_config("workload", workload=name, target=args.target,
                                kwargs=args.kwargs, batches=[args.batch], max_call_s=math.inf)
        job = job_config(cfg, device=args.device, dtype=args.dtype, out=args.out, host=args.host)
        given = lambda value, default: default if value is None else value  # noqa: E731
        job = dataclasses.replace(  # a value not given: config/job.yaml's
            job, point_budget_s=given(args.point_budget_s, job.point_budget_s),
            call_timeout_s=given(args.call_timeout_s, job.call_timeout_s),
            factory_timeout_s=given(args.factory_timeout_s, job.factory_timeout_s))
        device = JobDevice.resolve(job.device)
    except (TargetError, ConfigError, DeviceError, ValueError) as exc:
        print(f"{prog}: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    path = run_job(job, workload, device)
    rows = read_measurements(path).to_pandas()
    table = read_ceilings(args.ceilings)
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
        if row["status"] == "error":
            shown = user_traceback(factory, args)
            if shown:
                print(shown, file=sys.stderr)
        for line in timing_warnings(row):
            print(line, file=sys.stderr)
    print(f"rows written to {path}")
    dev = device.devices[0]
    if args.profile and rows.status.eq("ok").any():
        from experiments.analysis import prediction
        from experiments.core.dtypes import torch_dtype

        gen = torch.Generator(device=dev).manual_seed(0)
        fn, fargs = build(factory, args.batch, torch_dtype(args.dtype), dev, gen, args.kwargs)
        with precision(args.dtype):
            ops = profile_ops(fn, fargs, device=dev)
        if system:
            r = prediction.roofs(table, system, args.dtype, graph=dev.type == "cuda")
            pred = [prediction.predict_op(r, o["flops"], o["bytes"], o["cold_bytes"], o["kind"],
                                          o["calls"], exponentials=o["exponentials"])
                    for o in ops.to_dict("records")]
            ops["bound"] = [p["bound"] for p in pred]
            ops["level"] = [p["level"] for p in pred]
            ops["predicted_time_s"] = [p["predicted_time_s"] for p in pred]
        ops_path = Path(args.out).with_suffix(".ops.parquet")
        ops.to_parquet(ops_path)
        where = "device" if dev.type == "cuda" else "CPU"
        print(f"\nper aten op (torch.profiler, {where} time per call; views left out):\n"
              f"{op_table(ops.head(25))}\nwritten to {ops_path}")
    if args.ncu:
        if dev.type != "cuda":
            print("\n--ncu: Nsight Compute profiles GPU kernels; on a CPU the counted bytes stand")
        elif shutil.which("ncu") is None:
            print("\n--ncu: ncu is not on PATH: the bytes above are counted (compulsory), "
                  "not measured")
        else:
            import pandas as pd

            kernels = run_ncu(args.target, str(dev), args.dtype, args.batch, args.kwargs)
            counted = float(rows.bytes.iloc[0])
            dram = kernels["dram__bytes_read.sum"].sum() + kernels["dram__bytes_write.sum"].sum()
            ncu_path = Path(args.out).with_suffix(".ncu.parquet")
            kernels.to_parquet(ncu_path)
            with pd.option_context("display.width", 200, "display.max_colwidth", 60):
                print(f"\nper kernel (ncu, one call):\n{kernels.to_string()}")
            print(f"DRAM bytes measured {qty(dram, 'B')} against {qty(counted, 'B')} counted "
                  f"(compulsory): ratio {num(dram / counted)}; written to {ncu_path}")
    return status
