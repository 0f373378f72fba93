"""rooflab: measure how a CPU drives a GPU and where each operation sits on the roofline.

The experiments are the modules at this package's top, one per experiment: the list is the
folder. Each has NAME, DESCRIPTION, Config, points(cfg, ctx) and measure(state), run by the
harness (core/harness.py), may say where a sweep plans no job of it (NOT_ON, NOT_ON_DTYPES,
planned()), and has a config/experiment/<name>.yaml with its defaults. Everything else sits in
a room named for what it does:

    core/       the measurement harness: configs, timer, runner, rows, files, devices, conditions
    kernels/    the GPU (Triton) and CPU kernels the experiments time
    models/     the example models shipped to place on the roofline
    placement/  placing any callable: loading a target, counting its work, checking, profiling
    analysis/   collect, fit the roofline, knees, placements, the claims; compute.py: each step
    report/     figures, the SVG roofline, the HTML report, compare
    steps/      the aggregate steps (files in and out) and their command line: joins the two above
    cli/        the `rooflab` command and `python -m experiments place`
    sweep/      what Snakemake runs first: the sweep checks, the fork server
"""

from __future__ import annotations

import os
import sys

# `python -m experiments ...` puts the working directory first on the path, where a random.py or
# json.py of the user's would shadow the standard library: it goes last (its modules still load)
if sys.argv[:1] == ["-m"] and sys.path and os.path.abspath(sys.path[0] or ".") == os.getcwd():
    sys.path.append(sys.path.pop(0))

import importlib  # noqa: E402
import pkgutil  # noqa: E402
from pathlib import Path  # noqa: E402
from types import ModuleType

from experiments.core.cpus import unbind_openmp

# first, before anything loads torch (and its OpenMP runtime): core/cpus.py OPENMP_BINDING says why
_UNBOUND = unbind_openmp()
if _UNBOUND:
    late = " (torch was loaded already: this process may be pinned to one CPU)" if (
        "torch" in sys.modules) else ""
    print(f"rooflab: {' '.join(_UNBOUND)} left out of this process's environment{late}: with "
          "them OpenMP pins a process to one CPU when torch loads; rooflab places its own "
          "threads (cpus= picks the CPUs)", file=sys.stderr)

# modules at the top that are not experiments
_NOT_EXPERIMENTS = {"__main__"}


def experiment_names() -> tuple[str, ...]:
    """Every experiment: the modules at this package's top (found without importing them)."""
    return tuple(sorted(m.name for m in pkgutil.iter_modules(__path__)
                        if not m.ispkg and m.name not in _NOT_EXPERIMENTS
                        and not m.name.startswith("_")))


def experiment(name: str) -> ModuleType:
    """The experiment module `name`; KeyError naming the allowed ones if there is none."""
    names = experiment_names()
    if name not in names:
        raise KeyError(f"experiment={name!r} is unknown; allowed: {list(names)}")
    return importlib.import_module(f"{__name__}.{name}")


def all_experiments() -> dict[str, ModuleType]:
    return {name: experiment(name) for name in experiment_names()}


def experiment_config(name: str, config_dir=None, **overrides):
    """An experiment's config as a job gets it: config/experiment/<name>.yaml (the defaults) and
    `overrides` over its dataclass, checked. For code and tests that build a job without Hydra."""
    from omegaconf import OmegaConf

    from experiments.core.config import CONFIG_DIR, yaml_layer

    defaults = yaml_layer(Path(config_dir or CONFIG_DIR, "experiment", f"{name}.yaml"))
    merged = OmegaConf.merge(OmegaConf.structured(experiment(name).Config), defaults, overrides)
    return OmegaConf.to_object(merged)


def planned(name: str, kind: str, dtype: str) -> bool:
    """Whether a sweep plans a job of experiment `name` on a `kind` device ("cpu", "cuda") in
    `dtype`: not where its module says no row could measure anything (NOT_ON: the kinds a
    GPU-only experiment has nothing to time on; NOT_ON_DTYPES: kind -> dtypes no such device has).
    Such a job run by hand still writes its rows, each saying why; the sweep spares the start-up
    each would cost, a fair share of a small machine's jobs."""
    module = experiment(name)
    return kind not in getattr(module, "NOT_ON", ()) and \
        dtype not in getattr(module, "NOT_ON_DTYPES", {}).get(kind, ())


def holds_all_gpus(name: str) -> bool:
    """Whether a job of `name` holds every GPU of its pool at once (ALL_GPUS: peer_copy,
    collectives): the workflow gives it the pool's whole resource, and on Slurm all its GPUs."""
    return bool(getattr(experiment(name), "ALL_GPUS", False))
