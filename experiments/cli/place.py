"""Place any callable on the device's fitted roofline: time it, count its work, check it.

    python -m experiments place experiments.models:make_mlp --device cuda:0 --dtype bfloat16
    python -m experiments place path/to/my_model.py:make_model --batch 8 --profile --ncu

    from experiments.cli.place import place
    row = place(model, x, device="cuda:0", dtype="bfloat16", ceilings="results/roofline/ceilings.parquet")

A target `module:function` (or `path/to/file.py:function`) is a *factory* when its name starts
with `make_` (or it has `rooflab_factory = True`): make(batch, dtype, device, generator, **kwargs)
-> (fn, args), see experiments/models/. The command line needs a factory (it must build the
inputs); place() takes the callable and its tensors directly.

Work is counted, never derived from the timing: every aten op the call runs, FLOPs by torch's
formulas where it has them and rooflab's elsewhere (elementwise ops, norms, softmax, pooling,
embeddings, causal attention as causal, the fused transformer and RNN kernels: docs/placement.md),
bytes as the compulsory traffic (every input, every parameter and buffer reachable from fn, every
output, each moved once) and per op. The call is timed by the core timer replayed from a CUDA
graph where it can be captured, else as eager launches; its output is checked finite, two calls
must agree, and where a float64 copy can run, against float64. The prediction sums, over the
call's ops, the slowest of compute, memory traffic at the level its working set fits, and the
latency floor (experiments/analysis/prediction.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# argparse only at import: `--help` and bad arguments answer before torch loads
DTYPES = ("float64", "float32", "tf32", "float16", "bfloat16", "float8_e4m3")
FACTORY = ("make_xxx(batch, dtype, device, generator, **kwargs) -> (fn, args): builds random "
           "inputs and weights on `device` in torch `dtype` with `generator`; fn(*args) is what is "
           "timed (see experiments/models/)")


def place(fn, *args, device=None, dtype=None, ceilings=None, name=None, system=None,
          point_budget_s: float | None = None, **kwargs) -> dict:
    """Time, count and check fn(*args, **kwargs), and place it on the roofline fitted for its
    device. Returns the row (the one schema's fields, `params` a dict) plus the placement
    (experiments.analysis.placements.place_row: attained FLOP/s, roof, fraction, bound, predicted
    and measured time); without fitted ceilings for the device, `placement_note` says how to get
    them. The inputs are not rotated: a call whose data fits in cache is timed hot.
    `point_budget_s`: seconds of timing at most (None: config/job.yaml's)."""
    import socket

    import torch

    from experiments.analysis.placements import place_row
    from experiments.analysis.systems import find_system, no_roofline, read_ceilings
    from experiments.placement.counting import reachable_tensors, tensors
    from experiments.placement.measure import measure
    from experiments.core.device import device_facts
    from experiments.core.config import Settings
    from experiments.core.runner import Context

    found = tensors((args, kwargs)) + reachable_tensors(fn)
    dev = torch.device(device) if device else (found[0].device if found else torch.device("cpu"))
    if dtype is None:
        floats = [t.dtype for t in found if t.is_floating_point()]
        dtype = str(floats[0]).removeprefix("torch.") if floats else "float32"
    facts = device_facts(dev)
    settings = Settings.defaults()
    if point_budget_s is not None:  # else config/job.yaml's
        settings = settings.but(point_budget_s=point_budget_s)
    ctx = Context(device=dev, dtype=dtype, facts=facts, settings=settings)
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


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not the usage block
        self.exit(2, f"{self.prog}: {message} (--help lists the options)\n")


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc.msg} at column {exc.colno}): {text!r}")
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"give a JSON object of the factory's keywords, e.g. "
                                         f"'{{\"d_model\": 1024}}', not {text!r}")
    return value


def _positive(kind):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind.__name__}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
        return value
    return parse


def _device(text: str) -> str:
    import re

    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"{text!r}: give auto, cpu, cuda or cuda:N")
    return "cuda:0" if text == "cuda" else text


def parse_args(argv, prog="python -m experiments place"):
    p = _Parser(prog=prog, description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter,
                epilog=f"TARGET is a factory:\n  {FACTORY}.\nExample:\n  {prog} "
                       "experiments.models:make_mlp --device cuda:0 --dtype bfloat16 --profile")
    p.add_argument("target", metavar="TARGET",
                   help="module:make_fn or path/to/file.py:make_fn (a factory, see below)")
    p.add_argument("--device", type=_device, default="auto",
                   help="auto (the first GPU, else the CPU), cpu, cuda or cuda:N (default auto)")
    p.add_argument("--dtype", default="float32", choices=DTYPES, metavar="DTYPE",
                   help=f"the factory's dtype: {', '.join(DTYPES)} (default float32; tf32 is "
                        "float32 storage on TF32 tensor cores)")
    p.add_argument("--batch", type=_positive(int), default=8,
                   help="the batch size passed to the factory (default 8)")
    p.add_argument("--kwargs", type=_json_object, default={},
                   help="JSON object of keywords for the factory, e.g. '{\"d_model\": 1024}'")
    p.add_argument("--ceilings", default=None, help="fitted ceilings (Parquet) to place on "
                   "(default results/roofline/ceilings.parquet, if it exists)")
    p.add_argument("--system", default=None,
                   help="the ceilings' system to place on (default: this device's model)")
    p.add_argument("--out", default="results/manual/place.parquet",
                   help="where the row goes (default results/manual/place.parquet); --profile "
                        "and --ncu write beside it (.ops.parquet, .ncu.parquet)")
    p.add_argument("--point-budget-s", type=_positive(float),
                   help="seconds of timing for the call at most (default: config/job.yaml's)")
    p.add_argument("--call-timeout-s", type=_positive(float),
                   help="a call not returned after this long is a hang: a `timeout` row "
                        "(default: config/job.yaml's)")
    p.add_argument("--factory-timeout-s", type=_positive(float),
                   help="the same for the factory (default: config/job.yaml's)")
    p.add_argument("--host", default="", help="the host label the row carries (default: this "
                                              "machine's name)")
    p.add_argument("--profile", action="store_true",
                   help="also break the call down per aten op (torch.profiler), each placed")
    p.add_argument("--ncu", action="store_true",
                   help="also measure each kernel's DRAM/L2/L1 bytes with Nsight Compute (GPU)")
    p.add_argument("--ncu-child", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv, prog="python -m experiments place") -> int:
    """`python -m experiments place ...`: the workload experiment for one batch, then placed."""
    args = parse_args(argv, prog)  # before torch: --help and bad arguments are instant
    from experiments.core.store import unwritable

    if why := unwritable(folder := Path(args.out).absolute().parent):  # before measuring
        print(f"{prog}: --out {args.out}: its folder {folder} {why}; give --out a writable path",
              file=sys.stderr)
        return 2
    from experiments.core.isolate import supervise

    if args.ncu_child:  # under ncu, whose own timeout bounds it: no worker to follow
        return _run(args, prog)
    # the target in a watched worker: a hang or crash is a row (core/isolate.py)
    return supervise(lambda: _run(args, prog))


def _run(args, prog: str) -> int:
    from experiments.cli.place_run import run
    from experiments.core.store import CannotWrite

    try:
        return run(args, prog)
    except CannotWrite as exc:  # filled up while it measured: the rows printed above stand
        print(f"{prog}: {exc}; give --out a writable path", file=sys.stderr)
        return 2
