"""Structured configs: the job, and the base every experiment's config extends.

Hydra composes `config/job.yaml` with one `config/experiment/<name>.yaml`; OmegaConf checks types
and enum values (dtype) while composing, and each dataclass's `__post_init__` checks the rest when
the config becomes objects, before any device is touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from .core.devicenames import DeviceError, check as check_device
from .core.dtypes import Dtype


class ConfigError(ValueError):
    """A config value that is wrong; the message names the key and what is allowed."""


def check_sizes(key: str, values, *, allow_zero: bool = False) -> None:
    """Sizes must be a non-empty list of positive integers."""
    values = list(values)
    if not values:
        raise ConfigError(f"{key} is empty; give at least one size")
    low = 0 if allow_zero else 1
    bad = [v for v in values if not isinstance(v, int) or v < low]
    if bad:
        raise ConfigError(f"{key} has {bad}; every entry must be an integer >= {low}")


@dataclass
class ExperimentConfig:
    name: str = MISSING


@dataclass
class JobConfig:
    experiment: Any = MISSING
    device: str = "auto"  # auto | cpu | cuda | cuda:N | a pool of identical GPUs cuda:N+M
    dtype: Dtype = Dtype.float32
    out: str = "results/manual/${experiment.name}-${dtype}.parquet"
    host: str = ""  # label for merged datasets; empty: this machine's hostname
    point_budget_s: float = 0.5  # time spent timing one point (after warm-up)
    cv_threshold: float = 0.1  # above this a point is measured again, then flagged noisy
    retries: int = 1
    use_graph: bool = True  # replay a sample's calls from a CUDA graph
    seed: int = 0
    # a CPU point measured while other processes used more than this share of the machine's
    # cores is measured again, then flagged `contended`
    contention_threshold: float = 0.1
    config_source: dict = field(default_factory=dict)  # the sweep entry this job came from

    def __post_init__(self):
        try:
            check_device(self.device)
        except DeviceError as exc:
            raise ConfigError(str(exc)) from None
        if self.point_budget_s <= 0:
            raise ConfigError(f"point_budget_s={self.point_budget_s} must be > 0")
        if not 0 < self.contention_threshold <= 1:
            raise ConfigError(f"contention_threshold={self.contention_threshold} must be in (0, 1]: "
                              "a share of the machine's CPU time")
        if self.retries < 0:
            raise ConfigError(f"retries={self.retries} must be >= 0")
        if not self.out:
            raise ConfigError("out is empty; give the Parquet path to write")


def register_configs(experiment_configs: dict[str, type]) -> None:
    cs = ConfigStore.instance()
    cs.store(name="job_schema", node=JobConfig)
    for name, node in experiment_configs.items():
        cs.store(group="schema/experiment", name=name, node=node)
