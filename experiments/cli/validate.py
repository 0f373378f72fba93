"""`rooflab validate`: the op model judged on work nobody calibrated for.

    rooflab validate [--results DIR] [--seed N] [--count N] [--device D ...] [--host LABEL]

Draws `count` standard torch module configurations per device from `seed`
(experiments/models/heldout.py; config/config.yaml `validate:`), none of them an op_rates
calibration point, measures each as the workload experiment does (counted, checked, timed with
rotated copies, broken down per aten op) on each device in its dtype (a GPU in bfloat16, the CPU
in float32), places them on the run's fitted roofline with the run's own sweeps (RESULTS/
measurements.parquet and roofline/ceilings.parquet: `rooflab run` first), and writes under
RESULTS/validation/: the job files, judged.parquet (each held-out call and op, its error),
summary.parquet (median and p90 of |measured / predicted - 1| per class and device) and
summary.txt. `rooflab report` then shows the band beside every predicted time.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

from experiments.core import layout

TARGET = "experiments.models.heldout:make_heldout"
DTYPES = {"cpu": "float32", "cuda": "bfloat16"}


class Parser(argparse.ArgumentParser):
    """Bad input: one line naming what is wrong, exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def parser(prog: str = "rooflab validate") -> argparse.ArgumentParser:
    p = Parser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--results", default="results", help="results folder of a run (default "
                                                        "results)")
    p.add_argument("--seed", type=int, help="the generator's seed (default: config/config.yaml "
                                            "validate.seed)")
    p.add_argument("--count", type=int, help="configurations drawn per device (default: the "
                                             "config's validate.count)")
    p.add_argument("--device", action="append", help="cpu or cuda:N, repeatable (default: the "
                                                     "CPU and the first GPU, if any)")
    p.add_argument("--host", default="", help="the host label of the rows (default: the "
                                              "run's, where it has one; else this machine's)")
    return p


def settings(args) -> dict:
    """config/config.yaml's `validate:` (./config/config.yaml first), the options over it."""
    cfg = sweep_config().get("validate", {})
    out = {"seed": args.seed if args.seed is not None else cfg.get("seed"),
           "count": args.count if args.count is not None else cfg.get("count"),
           "max_copies": cfg.get("max_copies", {}), "calibrate": cfg.get("calibrate") or {}}
    for key in ("seed", "count"):
        if not isinstance(out[key], int) or (key == "count" and out[key] < 1):
            raise ValueError(f"validate.{key}={out[key]!r}: give an integer"
                             + (" >= 1" if key == "count" else ""))
    return out


def sweep_config() -> dict:
    import yaml

    from experiments.core.paths import shipped

    return yaml.safe_load(shipped("config/config.yaml").read_text()) or {}


def op_rates_keys(kind: str) -> dict:
    """The sweep's op_rates keys for this device kind (config/config.yaml `experiments:`)."""
    return ((sweep_config().get("experiments") or {}).get("op_rates") or {}).get(kind) or {}


def calibration(kind: str, also=()) -> dict:
    """op_rates module name -> its calibration batches on this device kind: the sweep's modules
    and the modules `also` names (those validate's `calibrate` shapes run)."""
    from experiments import experiment_config

    cfg = experiment_config("op_rates", **op_rates_keys(kind))
    return {name: list(getattr(cfg, name)) for name in dict.fromkeys([*cfg.modules, *also])}


class HeldoutJob:
    """The workload experiment over every drawn spec, as one job (runner.run_job's module)."""

    NAME = "workload"

    def __init__(self, specs: list[dict], max_copies: int):
        self.specs, self.max_copies = specs, max_copies

    def run(self, cfg, ctx):
        from experiments import workload
        from experiments.core import harness
        from experiments.models import heldout

        for spec in self.specs:
            b = spec["batch"]
            sized = {k: v for k, v in spec.items() if k != "batch"}
            one = dataclasses.replace(cfg, workload=heldout.name(spec), kwargs=sized,
                                      batches=[b], profile_batches=[b], ncu_batches=[],
                                      max_copies=self.max_copies, max_call_s=math.inf)
            yield from harness.rows(workload, one, ctx)


def measure(args, opts: dict, devices: list[str], folder: Path) -> int:
    """Every device's held-out job (in a watched worker: core/isolate.py), one file each."""
    from experiments import experiment_config
    from experiments.core.config import job_config
    from experiments.core.runner import run_job
    from experiments.models import heldout
    from experiments.op_rates import parse_shape

    for device in devices:
        kind = "cpu" if device == "cpu" else "cuda"
        extra = [parse_shape(t) for t in opts["calibrate"].get(kind) or []]
        batches = calibration(kind, also=[name for name, _ in extra])
        specs = heldout.draw(opts["seed"], opts["count"], kind, heldout.calibration_specs(
            kind, batches, extra))
        base = experiment_config("workload", workload="heldout", target=TARGET, kwargs={},
                                 batches=[1])
        out = folder / f"{device.replace(':', '')}-{DTYPES[kind]}.parquet"
        timing = (sweep_config().get("job") or {}).get(kind) or {}  # the sweep's, per kind
        job = job_config(base, device=device, dtype=DTYPES[kind], out=str(out), host=args.host,
                         **timing)
        if shapes := calibrating(specs, opts["calibrate"].get(kind) or []):
            calibrate(device, kind, shapes, folder, args.host, timing)
        copies = int((opts["max_copies"] or {}).get(kind, 2 if kind == "cpu" else 64))
        print(f"rooflab validate: {len(specs)} held-out configurations on {device} "
              f"({DTYPES[kind]}, seed {opts['seed']})", file=sys.stderr, flush=True)
        run_job(job, HeldoutJob(specs, copies))
    return 0


# the op_rates modules whose rates each held-out kind's classes read (Linear: none; an RNN's
# steps read GELU's for their pointwise kernel)
READS = {"conv1d": ("conv1d",), "conv2d": ("conv2d",), "conv_transpose2d": ("conv_transpose2d",),
         "layer_norm": ("layer_norm",), "gelu": ("gelu",), "softmax": ("softmax",),
         "sdpa": ("sdpa",), "mha": ("sdpa", "mha", "permute_copy", "add"),
         "encoder_layer": ("sdpa", "encoder_layer", "layer_norm", "permute_copy", "add"),
         "embedding_bag": ("embedding_bag",), "lstm": ("gelu",), "gru": ("gelu",)}


def calibrating(specs: list[dict], shapes: list[str]) -> list[str]:
    """The `calibrate` shapes of the modules whose classes the drawn specs contain."""
    from experiments.op_rates import parse_shape

    read = {module for s in specs for module in READS.get(s["kind"], ())}
    return [text for text in shapes if parse_shape(text)[0] in read]


def calibrate(device: str, kind: str, shapes: list[str], folder: Path, host: str,
              timing: dict) -> None:
    """The op_rates experiment at `shapes` alone (each at its module's calibration batches, no
    factory sizes, no floors: the run's), into folder/calibration-<device>-<dtype>.parquet:
    its rows join the run's for judging (judge)."""
    from experiments import all_experiments, experiment_config
    from experiments.core.config import job_config
    from experiments.core.runner import run_job
    from experiments.op_rates import parse_shape

    modules = list(dict.fromkeys(parse_shape(t)[0] for t in shapes))
    base = experiment_config("op_rates", **(op_rates_keys(kind) | {
        "modules": modules, "shapes": shapes, "floor_ops": [], "own_sizes": False}))
    out = folder / f"calibration-{device.replace(':', '')}-{DTYPES[kind]}.parquet"
    print(f"rooflab validate: {len(shapes)} op_rates shapes on {device} for the drawn classes",
          file=sys.stderr, flush=True)
    run_job(job_config(base, device=device, dtype=DTYPES[kind], out=str(out), host=host,
                       **timing), all_experiments()["op_rates"])


def judge(results: Path, files: list[str], seed: int) -> tuple:
    """(judged, summary) of the held-out rows on the run's roofline and sweeps."""
    import pandas as pd

    from experiments.analysis import dataset, placements, validation

    ds = dataset.load(layout.file(results, "dataset"))
    ceilings = pd.read_parquet(layout.file(results, "ceilings"))
    held = dataset.add_labels(dataset.collect(files, log=lambda _: None))
    base = ds.rows[ds.rows.experiment != "workload"]
    table = placements.placement_table(pd.concat([base, held], ignore_index=True), ceilings)
    judged = validation.judge(table, seed, held)
    return judged, validation.summary(judged)


def main(argv=None, prog: str = "rooflab validate") -> int:
    args = parser(prog).parse_args(argv)
    results = Path(args.results)
    need = [layout.file(results, "dataset"), layout.file(results, "ceilings")]
    if missing := [str(p) for p in need if not p.is_file()]:
        print(f"{prog}: {', '.join(missing)} not found: run `rooflab run` (or give --results "
              "a run's folder) first", file=sys.stderr)
        return 2
    try:
        opts = settings(args)
    except ValueError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    folder = (results / layout.VALIDATION).parent
    folder.mkdir(parents=True, exist_ok=True)
    if bad := [d for d in args.device or () if d != "cpu" and not d.startswith("cuda")]:
        print(f"{prog}: --device {bad[0]!r}: give cpu or cuda:N", file=sys.stderr)
        return 2
    args.host = args.host or run_host(layout.file(results, "dataset"))
    for old in job_files(folder):  # an earlier draw's rows are not this one's
        old.unlink()
    from experiments.core.isolate import supervise

    # the devices are looked at in the worker: CUDA is never touched before the fork
    status = supervise(lambda: measure(args, opts, args.device or default_devices(), folder))
    files = [str(p) for p in job_files(folder)]
    if status or not files:
        print(f"{prog}: measuring failed (status {status}); no held-out rows", file=sys.stderr)
        return 1
    from experiments.analysis import validation
    from experiments.core.store import write_text_atomic

    judged, summary = judge(results, files, opts["seed"])
    if judged.empty:  # every held-out row stands, but nothing to place them on
        print(f"{prog}: no held-out row could be placed: {layout.file(results, 'ceilings')} "
              "has no fitted ceilings for these devices (a busy machine leaves them unfitted: "
              "`rooflab report` says why); run `rooflab run` again", file=sys.stderr)
        return 1
    judged.to_parquet(folder / "judged.parquet")
    summary.to_parquet(results / layout.VALIDATION)
    text = validation.text(summary)
    write_text_atomic((results / layout.VALIDATION).with_suffix(".txt"), text)
    print(text + f"\nwritten: {folder}/judged.parquet, summary.parquet, summary.txt; "
          "`rooflab report` shows the band beside each predicted time")
    return 0


def run_host(dataset: Path) -> str:
    """The host label of the run's own rows where they have one (a run made with
    `--config host=node` on a machine of another name), else "" (this machine's)."""
    import pandas as pd

    rows = pd.read_parquet(dataset, columns=["host", "source"])
    hosts = rows.host[rows.source == "run"].dropna().unique()
    return str(hosts[0]) if len(hosts) == 1 else ""


def job_files(folder: Path) -> list[Path]:
    """The held-out jobs' files in RESULTS/validation (<device>-<dtype>.parquet)."""
    return sorted(p for p in folder.glob("*-*.parquet"))


def default_devices() -> list[str]:
    import torch

    return ["cpu"] + (["cuda:0"] if torch.backends.cuda.is_built()
                      and torch.cuda.is_available() else [])
