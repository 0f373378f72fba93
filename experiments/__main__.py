"""Run one job by hand or from Snakemake:

    python -m experiments experiment=bandwidth device=cpu dtype=float32 out=results/x.parquet
    python -m experiments experiment=matmul device=cuda:0+1 ...  # on whichever GPU is free
    python -m experiments --list        # the experiments, each with its description
    python -m experiments place experiments.models:make_mlp --device cuda:0  # experiments/placement/
"""

from __future__ import annotations

from experiments.sweep.forkserver import delegate

delegate("experiments")  # to the run's fork server if any (imports done there)

import logging  # noqa: E402
import sys  # noqa: E402

if __name__ == "__main__" and sys.argv[1:2] == ["place"]:  # before Hydra and torch: --help is fast
    from experiments.cli.place import main as place_main

    sys.exit(place_main(sys.argv[2:]))
from pathlib import Path  # noqa: E402

from experiments.core.cpus import pin_from_argv  # noqa: E402

pin_from_argv(sys.argv[1:])  # before torch and the rest load: their import runs on the job's CPUs

import hydra  # noqa: E402
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ValidationError

from experiments import all_experiments
from experiments.core.config import CONFIG_DIR as _CONFIG_DIR, ConfigError, register_configs, yaml_error
from experiments.core.device import DeviceError, JobDevice
from experiments.core.isolate import supervise
from experiments.core.runner import run_job
from experiments.sweep.checks import host_error

CONFIG_DIR = str(_CONFIG_DIR)
MODULES = all_experiments()
register_configs({name: m.Config for name, m in MODULES.items()})
log = logging.getLogger("rooflab")


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="job")
def main(cfg: DictConfig) -> None:
    try:
        job = OmegaConf.to_object(cfg)  # runs every dataclass's __post_init__ checks
    except (ConfigError, ValueError, ValidationError) as exc:
        bad_config(exc)
    module = MODULES[job.experiment.name]
    if getattr(module, "USER_CODE", False):  # its worker touches the device, never this process
        sys.exit(supervise(lambda: run(job, module)))
    run(job, module)


def bad_config(exc: Exception) -> None:
    print(f"rooflab: bad config: {exc}", file=sys.stderr)
    sys.exit(2)


def run(job, module) -> None:
    try:
        device = JobDevice.resolve(job.device)  # one that does not exist fails before measuring
    except (DeviceError, ValueError) as exc:
        bad_config(exc)
    path = run_job(job, module, device)
    log.info("wrote %s", path)


def list_experiments() -> None:
    """Each experiment with the claims that read its rows (their `experiments=`)."""
    from experiments.analysis.claims import by_experiment

    reads = by_experiment()
    for name, module in MODULES.items():
        print(f"{name:<12} {', '.join(reads.get(name, ())):<24} {module.DESCRIPTION}")


def check_config_files() -> None:
    """Hydra reports a YAML error as a traceback; say which file and line instead, and stop."""
    root = Path(CONFIG_DIR)
    for path in [root / "job.yaml", *sorted(root.glob("experiment/*.yaml"))]:
        if why := yaml_error(path):
            print(f"rooflab: bad config file: {why}", file=sys.stderr)
            sys.exit(2)


if __name__ == "__main__":  # `place` left above, before the imports; the rest is Hydra's
    if "--list" in sys.argv[1:]:
        list_experiments()
    else:
        check_config_files()
        if why := host_error(sys.argv[1:]):
            print(f"rooflab: bad config: {why}", file=sys.stderr)
            sys.exit(2)
        main()
