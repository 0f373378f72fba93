"""Every experiment, by name. Adding one: a module with NAME, DESCRIPTION, CLAIMS, Config,
run(cfg, ctx) and points(cfg, ctx) (the rows run yields: a job's progress); a YAML file in
config/experiment/; one line here."""

from __future__ import annotations

import importlib
from types import ModuleType

MODULES = {
    "bandwidth": "experiments.bandwidth",
    "matmul": "experiments.matmul",
    "decode": "experiments.decode",
    "timing": "experiments.timing",
    "transfer": "experiments.transfer",
    "intensity": "experiments.intensity",
    "l1": "experiments.l1",
    "launch": "experiments.launch",
    "peer_copy": "experiments.peer_copy",
    "collectives": "experiments.collectives",
    "workload": "experiments.workload",  # config/config.yaml's `workloads:`, not `experiments:`
}


def get(name: str) -> ModuleType:
    if name not in MODULES:
        raise KeyError(f"experiment={name!r} is unknown; allowed: {sorted(MODULES)}")
    return importlib.import_module(MODULES[name])


def all_modules() -> dict[str, ModuleType]:
    return {name: get(name) for name in MODULES}


def all_gpus(name: str) -> bool:
    """Whether a job of `name` holds every GPU of its pool at once (ALL_GPUS: peer_copy, collectives):
    the workflow gives it the pool's whole resource, and on Slurm all of the pool's GPUs."""
    return bool(getattr(get(name), "ALL_GPUS", False))
