"""Every experiment, by name. Adding one: a module with NAME, DESCRIPTION, CLAIMS, Config and
run(cfg, ctx); a YAML file in config/experiment/; one line here."""

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
    "launch": "experiments.launch",
    "workload": "experiments.workload",  # config/config.yaml's `workloads:`, not `experiments:`
}


def get(name: str) -> ModuleType:
    if name not in MODULES:
        raise KeyError(f"experiment={name!r} is unknown; allowed: {sorted(MODULES)}")
    return importlib.import_module(MODULES[name])


def all_modules() -> dict[str, ModuleType]:
    return {name: get(name) for name in MODULES}
