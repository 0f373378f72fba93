"""Per kernel and per aten op: DRAM, L2 and L1 bytes measured by Nsight Compute."""

from __future__ import annotations
import csv
import io
import json
import math
import shutil
import subprocess
import sys
import torch

from experiments.placement.counting import precision, tensors
from experiments.placement.profile import op_name, shapes_key
from experiments.placement.target import build


NCU_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum",
               "l1tex__t_bytes.sum")


_UNITS = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
          "kibyte": 1024, "mibyte": 1024 ** 2, "gibyte": 1024 ** 3, "": 1}


class NvtxOps(torch.utils._python_dispatch.TorchDispatchMode):
    """Each aten op inside an NVTX range named `op|input shapes`: ncu renames the kernels it
    launches after it (--print-nvtx-rename kernel), so kernels join the profiler's ops. Ops run
    with the mode popped, so ranges never nest."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        torch.cuda.nvtx.range_push(f"{op_name(func, args)}|{shapes_key(tensors((args, kwargs)))}")
        try:
            return func(*args, **kwargs)
        finally:
            torch.cuda.nvtx.range_pop()


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


def ncu_child(factory, args) -> None:
    """Inside ncu: one warm call, then the profiled one between cudaProfilerStart and Stop."""
    from experiments.core.dtypes import torch_dtype

    dev = torch.device(args.device)
    gen = torch.Generator(device=dev).manual_seed(0)
    fn, fargs = build(factory, args.batch, torch_dtype(args.dtype), dev, gen, args.kwargs)
    with precision(args.dtype):
        fn(*fargs)
        torch.cuda.synchronize(dev)
        torch.cuda.cudart().cudaProfilerStart()
        with NvtxOps():
            fn(*fargs)
        torch.cuda.synchronize(dev)
        torch.cuda.cudart().cudaProfilerStop()


NCU_LEVELS = {  # LEVELS, each from its metrics
    "dram_bytes": ("dram__bytes_read.sum", "dram__bytes_write.sum"),
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
