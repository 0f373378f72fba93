# Config validation, the sweep grid and input functions. Nothing here measures anything.
import json
import re
import shlex
from pathlib import Path
from types import SimpleNamespace
import socket
import sys

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from experiments import holds_all_gpus, planned
from experiments.core.config import ConfigError, parse_cpus
from experiments.core.paths import config_dir
from experiments.sweep.checks import (check_results, check_sweep, check_workloads, coerce_nested,
                                      stray_files)
from experiments.sweep import forkserver
from experiments.sweep.triggers import job_digest, stamp
from experiments.steps.pipeline import Files
from experiments.core import cotenants, devicenames, layout
from experiments.core.devicenames import DeviceName


for _key in ("job", "experiments", "workloads"):  # --config's nested numbers arrive as text
    if isinstance(config.get(_key), dict):
        config[_key] = coerce_nested(config[_key])
validate(config, "../schemas/config.schema.yaml")
# experiment names and their keys: from the experiment modules and their dataclasses, not the schema
try:
    check_sweep(config["experiments"])
    check_workloads(config.get("workloads"))  # each target imported: a misspelt one fails here
    if forkserver.runs_jobs(sys.argv):  # a dry run or a listing writes no results
        check_results(config["results"])
except ConfigError as exc:
    raise WorkflowError(f"config: {exc}") from None

cotenants.mark_run()  # the jobs this run starts are no co-tenants of each other on a GPU

SAFE = re.compile(r"[^A-Za-z0-9._-]")


def gpu_models():
    import torch  # only here: torch is slow to import and a sweep may not need it

    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def device_kind(slug):
    return "cpu" if slug == "cpu" else "cuda"


HOST = SAFE.sub("_", socket.gethostname() if config["host"] == "auto" else config["host"])
# Device slugs (cpu, cuda0, cuda0+1 for a pool of identical GPUs) as paths spell them.
try:
    DEVICES = [DeviceName(d).slug for d in
               devicenames.sweep_devices(config["devices"], config["multi_gpu"], gpu_models)]
except devicenames.DeviceError as exc:
    raise WorkflowError(f"config: {exc}") from None
RESULTS = config["results"]
# One measurement job's file; job_args builds the same path from the wildcards. {case} is its
# dtype, or for a workload job (experiment `workload`, one per entry of `workloads:`)
# <workload>-<dtype>: the workload experiment's folder holds one file per workload and dtype.
MEASUREMENT = layout.under(RESULTS, layout.MEASUREMENT)

# Each device is a resource. A CPU's capacity is 1: its jobs run one at a time. A GPU's is
# PREFETCH per GPU: the next job starts (Python, torch, Hydra: seconds) while one measures, and
# waits for the GPU's lock (experiments/core/device.py) before touching the GPU, so one job still
# measures per GPU at a time.
PREFETCH = 2
for _slug in DEVICES:
    _device = DeviceName.from_slug(_slug)
    workflow.register_resource(_device.resource, PREFETCH * len(_device.gpus) or 1)


def grid():
    """(experiment, device, case) of every measurement job in the sweep: each experiment's dtypes
    (where its module has something to measure: experiments.planned), and each workload's as
    experiment `workload`, case <workload>-<dtype>."""
    return [
        (exp, dev, dtype)
        for exp, spec in config["experiments"].items()
        for dev in DEVICES
        for dtype in spec["dtypes"]
        if planned(exp, device_kind(dev), dtype)
    ] + [
        ("workload", dev, f"{name}-{dtype}")
        for name, spec in (config.get("workloads") or {}).items()
        for dev in DEVICES
        for dtype in spec["dtypes"]
    ]


def job_spec(wildcards):
    """(sweep entry, dtype, the experiment's own overrides beyond its kind's settings) of a job."""
    if wildcards.experiment != "workload":
        return config["experiments"][wildcards.experiment], wildcards.case, {}
    name, _, dtype = wildcards.case.rpartition("-")
    spec = config["workloads"][name]
    return spec, dtype, {"experiment.workload": name, "experiment.target": spec["target"]}


def measurement_files():
    """This machine's sweep, plus the files of other hosts copied into results/measurements/
    (how machines are merged: each keeps its own host folder)."""
    own = [
        MEASUREMENT.format(host=HOST, device=dev, experiment=exp, case=case)
        for exp, dev, case in grid()
    ]
    others = sorted(
        str(path)
        for path in Path(RESULTS).glob(layout.MEASUREMENT_GLOB)
        if path.parts[-4] != HOST
    )
    return own + others


# Files no job of this sweep writes are left out of the dataset: said at every run, not only
# when collect reruns.
for _line in stray_files(layout.under(RESULTS, layout.MEASUREMENTS), measurement_files()):
    print(_line, file=sys.stderr)


def hydra_value(value):
    """A config value as a Hydra override value: JSON for numbers and lists, quoted strings."""
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace("'", "\\'")
        return f"'{escaped}'"
    return json.dumps(value)


def overlap_cpus():
    """(the CPU job's cores, the GPU jobs' cores) as CPU lists when CPU and GPU measurements run
    side by side on this machine, else None. The GPU jobs get one core per job that may run at
    once (PREFETCH per GPU: the measuring one and the next, starting), the CPU job the rest
    (`auto`: only when that leaves it at least 3/4 of the cores, and only for a local run: on
    Slurm a CPU job has its node to itself)."""
    mode = str(config.get("cpu_gpu_overlap", "auto")).lower()  # auto, true or false
    gpus = PREFETCH * sum(pool_gpus(s) for s in DEVICES if s != "cpu")
    cores = all_cores()
    if (mode == "false" or not gpus or "cpu" not in DEVICES or not workflow.local_exec
            or cores - gpus < 1 or (mode == "auto" and cores < 4 * gpus)):
        return None
    return f"{gpus}-{cores - 1}", f"0-{gpus - 1}"


def job_threads(wildcards):
    """A CPU measurement takes every core, or all but the GPU jobs' when they overlap."""
    if wildcards.device != "cpu":
        return 1
    pins = overlap_cpus()
    return all_cores() - len(parse_cpus(pins[1])) if pins else all_cores()


def measure_priority(wildcards):
    """GPU jobs first, then the CPU's (which take every core, so the two phases never overlap
    unless cpu_gpu_overlap). Beside the GPU jobs the fork server loads what workload jobs import
    (dynamo, sympy) and compiles the CPU jobs' numba kernels (sweep/warm.py plan()): workload
    jobs come last of a GPU's jobs (the first ones, started before dynamo was in, waited seconds
    for their first row)."""
    if wildcards.device == "cpu":
        return 0
    return 1 if wildcards.experiment == "workload" else 2


def pin_cpus(wildcards):
    """The job's CPUs: its side of overlap_cpus(), else all. A resource, not a param: the
    machine's core count is not a sweep value, and a change of it reruns nothing."""
    pins = overlap_cpus()
    return (pins[0] if wildcards.device == "cpu" else pins[1]) if pins else "all"


def job_args(wildcards):
    """The job's command-line overrides, one shell-quoted word each.

    A function of the wildcards alone: Snakemake records (and compares, rerun trigger `params`)
    only params it does not consider derived from `output`, `input`, `threads` or `resources`; a
    function taking `output` is never recorded, so a changed sweep value would rerun nothing."""
    kind = device_kind(wildcards.device)
    spec, dtype, own = job_spec(wildcards)
    out = MEASUREMENT.format(host=wildcards.host, device=wildcards.device,
                             experiment=wildcards.experiment, case=wildcards.case)
    settings = {**config.get("job", {}).get(kind, {})}
    settings.update({f"experiment.{k}": v for k, v in (spec.get(kind) or {}).items()})
    return shlex.join(
        [
            f"experiment={wildcards.experiment}",
            *(f"{key}={hydra_value(value)}" for key, value in own.items()),
            f"device={DeviceName.from_slug(wildcards.device)}",
            f"dtype={dtype}",
            f"host={hydra_value(HOST)}",
            f"out={hydra_value(out)}",
            # ++: a mapping's keys are new keys of an empty one (a workload's factory kwargs;
            # Hydra's struct mode)
            *(f"++{key}={hydra_dict(value)}" if isinstance(value, dict) else
              f"{key}={hydra_value(value)}" for key, value in settings.items()),
        ]
    )


def job_inputs(wildcards):
    """A digest of what shapes the job beside its command line: config/job.yaml's and its
    experiment's defaults, the code it runs, a workload's target, the versions of the packages
    that time it (experiments/sweep/triggers.py). A param, and a function of the wildcards alone
    (as job_args), so a change of any of them re-measures exactly the jobs it touches."""
    spec, _, own = job_spec(wildcards)
    return job_digest(wildcards.experiment, str(config_dir()), own.get("experiment.target", ""))


def job_stamp(wildcards):
    """The job's stamp file (layout.JOB_STAMP): its command line and job_inputs' digest, an
    input whose time moves when they change, with or without Snakemake's records. Written for
    the whole grid before the DAG is built (Snakemake caches which files exist)."""
    path = layout.under(RESULTS, layout.JOB_STAMP).format(**{k: getattr(wildcards, k) for k in
                                                            layout.JOB_PARTS})
    return stamp(path, f"{job_args(wildcards)}\n{job_inputs(wildcards)}\n")



def hydra_dict(value):
    """A mapping as a Hydra override value, {key: value, ...} (Hydra's keys are unquoted)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {hydra_dict(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(hydra_dict(v) for v in value) + "]"
    return hydra_value(value)


# What one job asks Slurm for (workflow/profiles/slurm; a local run ignores it), by device kind.
# A GPU job: one GPU (of `slurm.gpu_model`), and cores for the thread that drives it and the CUDA
# driver's own. A CPU job: a whole node (--exclusive), so no other job shares its cores, caches or
# memory bandwidth; mem_mb=0 sends no --mem, leaving it all the memory of its node (or the
# cluster's default for a whole node); cpus_per_task None: its `threads`, every core.
SLURM = config.get("slurm") or {}
SLURM_JOB = {
    "cpu": dict(gpu=0, gpu_model="", slurm_partition=SLURM.get("cpu_partition") or "",
                slurm_extra="--exclusive", mem_mb=0, cpus_per_task=None),
    "cuda": dict(gpu=1, gpu_model=SLURM.get("gpu_model") or "",
                 slurm_partition=SLURM.get("partition") or "", slurm_extra="", mem_mb=16000,
                 cpus_per_task=4),
}


def pool_gpus(slug):
    """GPUs of a device slug: 0 for the CPU, 1 for cuda3, 2 for the pool cuda0+1."""
    return len(DeviceName.from_slug(slug).gpus)


def device_units(wildcards, slug):
    """How much of device `slug`'s resource a job takes: an experiment between GPUs (peer_copy,
    collectives) holds every GPU of its pool, so nothing else runs on them meanwhile; any other
    job one GPU (the CPU's capacity is 1)."""
    if wildcards.device != slug:
        return 0
    # a job between GPUs takes the whole resource: no job waits beside it, holding nothing
    # (on a pool of one GPU it is a job like any other: it prefetches too)
    whole = holds_all_gpus(wildcards.experiment) and pool_gpus(slug) > 1
    return PREFETCH * pool_gpus(slug) if whole else 1


def slurm_resource(wildcards, key):
    """What a job asks Slurm for: SLURM_JOB by device kind; a GPU job of an experiment between
    GPUs asks for all of its pool's GPUs (one node: one task), with cores and memory to match."""
    value = SLURM_JOB[device_kind(wildcards.device)][key]
    gpus = pool_gpus(wildcards.device)
    if wildcards.device != "cpu" and gpus > 1 and holds_all_gpus(wildcards.experiment):
        if key == "gpu":
            return gpus
        if key in ("mem_mb", "cpus_per_task"):
            return value * gpus
    return value


def all_cores():
    """Every core Snakemake may use. Submitting to Slurm they are not known (1 is enough: a CPU
    job has its node to itself); the job evaluates this again inside its allocation, where it is
    every core."""
    try:
        return workflow.cores
    except WorkflowError:
        return 1


# The aggregate steps' files (experiments/steps/pipeline.py); the reference devices: the working
# directory's config/datasheets.yaml, else the shipped one.
DATASHEETS = str(shipped("config/datasheets.yaml", ROOT))
FILES = Files.under(RESULTS, DATASHEETS)


def step_files(step, which, *, without=()):
    """A step's reads or writes (which: "reads" | "writes") as a rule's named files."""
    return {key: getattr(FILES, key) for key in getattr(step, which) if key not in without}


# every job's stamp before the DAG is built (job_stamp: Snakemake caches which files exist)
for _exp, _dev, _case in grid():
    job_stamp(SimpleNamespace(host=HOST, device=_dev, experiment=_exp, case=_case))
