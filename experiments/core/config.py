"""Structured configs: the job, and the base every experiment's config extends.

Hydra composes `config/job.yaml` with one `config/experiment/<name>.yaml`; OmegaConf checks types
and enum values (dtype) while composing, and each dataclass's `__post_init__` checks the rest when
the config becomes objects, before any device is touched.
"""

from __future__ import annotations

import functools
import math
import tempfile
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, ClassVar

import yaml
from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from experiments.core.cpus import parse_cpus
from experiments.core.devicenames import DeviceError, check as check_device
from experiments.core.dtypes import Dtype
from experiments.core.paths import config_dir


CONFIG_DIR = config_dir()  # job.yaml, experiment/*.yaml: the checkout's, else the installed copy


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


def check_positive(key: str, value) -> None:
    """A finite number > 0 (NaN fails every comparison, so `value <= 0` alone lets it through)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            math.isfinite(value) and value > 0):
        raise ConfigError(f"{key}={value!r} must be a finite number > 0")


def check_writable(key: str, path) -> None:
    """`path` can be written as a file: not a directory, and its nearest existing folder takes a
    new file (tried, not asked: os.access says yes to root even on a read-only mount)."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{key}={str(path)!r} is a directory; give the Parquet file to write")
    folder = path.parent
    while not folder.exists():  # write_atomic makes the missing folders
        folder = folder.parent
    if not folder.is_dir():
        raise ConfigError(f"{key}={str(path)!r}: {folder} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise ConfigError(f"{key}={str(path)!r}: cannot write in {folder} ({exc.strerror})") from None


def yaml_error(path) -> str | None:
    """Why the YAML file at `path` does not parse, naming the file and line; None if it does
    (or is absent: whoever reads it says so)."""
    if not Path(path).is_file():
        return None
    try:
        yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        return f"{where}: not valid YAML: {problem}" + (f" ({context})" if context else "")
    return None


def check_rule(key: str, value, rule) -> None:
    """One value against its rule (ExperimentConfig.RULES): "sizes" (or "sizes0", zero allowed),
    "bool", "> x" or ">= x" (a number, not NaN), "int >= x", or the names a non-empty list may
    hold."""
    if not isinstance(rule, str):  # the names a list may hold (a tuple, or a dict's keys)
        values = list(value)
        if not values or any(v not in rule for v in values):
            raise ConfigError(f"{key}={values!r}; allowed: a non-empty list of {', '.join(rule)}")
        return
    if rule in ("sizes", "sizes0"):
        return check_sizes(key, value, allow_zero=rule == "sizes0")
    if rule == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{key}={value!r} must be true or false")
        return
    *kind, op, bound = rule.split()
    number = not isinstance(value, bool) and isinstance(value, int if kind else (int, float))
    # NaN fails every comparison; inf passes "> 0" (no limit: `place` and `validate` time so)
    if not number or value != value or not (
            value > float(bound) if op == ">" else value >= float(bound)):
        raise ConfigError(f"{key}={value!r} must be {'an integer' if kind else 'a number'} "
                          f"{op} {bound}")


@dataclass
class ExperimentConfig:
    """An experiment's keys. RULES (key -> check_rule's rule) are checked when the config becomes
    objects; a subclass's __post_init__ adds what spans keys, after super().__post_init__()."""

    name: str = MISSING
    RULES: ClassVar[dict] = {}

    def __post_init__(self):
        for key, rule in self.RULES.items():
            check_rule(f"experiment.{key}", getattr(self, key), rule)


@dataclass
class JobConfig:
    """One job's keys; their defaults, and what each means, are in config/job.yaml (one layer)."""

    experiment: Any = MISSING
    device: str = MISSING
    dtype: Dtype = MISSING
    out: str = MISSING
    host: str = MISSING
    point_budget_s: float = MISSING
    cv_threshold: float = MISSING
    retries: int = MISSING
    use_graph: bool = MISSING
    seed: int = MISSING
    contention_threshold: float = MISSING
    precision: float = MISSING
    min_point_s: float = MISSING
    min_samples: int = MISSING
    call_timeout_s: float = MISSING
    factory_timeout_s: float = MISSING
    cpus: str = MISSING

    def __post_init__(self):
        try:
            check_device(self.device)
        except DeviceError as exc:
            raise ConfigError(str(exc)) from None
        check_positive("point_budget_s", self.point_budget_s)
        check_positive("cv_threshold", self.cv_threshold)
        check_positive("call_timeout_s", self.call_timeout_s)
        check_positive("factory_timeout_s", self.factory_timeout_s)
        if not 0 < self.contention_threshold <= 1:
            raise ConfigError(f"contention_threshold={self.contention_threshold} must be in (0, 1]: "
                              "a share of the machine's CPU time")
        if not 0 <= self.precision < 1:
            raise ConfigError(f"precision={self.precision} must be in [0, 1): the relative "
                              "half-width of a median's 95 % interval (0: use the whole budget)")
        if not (math.isfinite(self.min_point_s) and self.min_point_s >= 0):
            raise ConfigError(f"min_point_s={self.min_point_s} must be a finite number >= 0")
        if not (isinstance(self.min_samples, int) and self.min_samples >= 2):
            raise ConfigError(f"min_samples={self.min_samples} must be an integer >= 2: one "
                              "sample has no spread")
        try:
            parse_cpus(self.cpus)
        except ValueError:
            raise ConfigError(f"cpus={self.cpus!r}: give CPU numbers and ranges, e.g. '2-15' or "
                              "'0,4-7'; empty or 'all': every CPU") from None
        if self.retries < 0:
            raise ConfigError(f"retries={self.retries} must be >= 0")
        if not self.out:
            raise ConfigError("out is empty; give the Parquet path to write")
        # before any point is measured, not after the last one
        check_writable("out", self.out)


def yaml_layer(path) -> Any:
    """A config file's values without Hydra's own keys (defaults list, hydra:)."""
    base = OmegaConf.load(path)
    for key in ("defaults", "hydra"):
        base.pop(key, None)
    return base


@functools.cache
def job_defaults(config_dir=CONFIG_DIR) -> dict:
    """config/job.yaml's values: every job setting's default, for code that measures without
    Hydra (Context, place(), the timer), so it measures as a job does."""
    return OmegaConf.to_container(yaml_layer(Path(config_dir, "job.yaml")), resolve=False)


def job_default(key: str):
    return job_defaults()[key]


@dataclass(frozen=True)
class Settings:
    """The job's measuring rules, typed and read once: from the job's config (`of`), or for code
    that measures without Hydra (place(), tests) from config/job.yaml (`defaults`). Their meanings
    are in config/job.yaml."""

    point_budget_s: float  # the harness raises or caps it per point (core/harness.py budget_s)
    cv_threshold: float
    retries: int
    use_graph: bool
    seed: int
    contention_threshold: float
    precision: float  # stop sampling a point once its median is known this well...
    min_point_s: float  # ...but not before this long
    min_samples: int  # samples a point takes however long its calls
    call_timeout_s: float  # user code (core/isolate.py): a call's limit
    factory_timeout_s: float  # ...and a factory's

    @classmethod
    def of(cls, job: "JobConfig") -> "Settings":
        return cls(point_budget_s=job.point_budget_s, cv_threshold=job.cv_threshold,
                   retries=job.retries, use_graph=job.use_graph, seed=job.seed,
                   contention_threshold=job.contention_threshold, precision=job.precision,
                   min_point_s=job.min_point_s, min_samples=job.min_samples,
                   call_timeout_s=job.call_timeout_s, factory_timeout_s=job.factory_timeout_s)

    @staticmethod
    @functools.cache
    def defaults() -> "Settings":
        """config/job.yaml's settings, the one default of each (read once per process)."""
        layer = job_defaults()
        return OmegaConf.to_object(OmegaConf.merge(
            OmegaConf.structured(Settings), {f.name: layer[f.name] for f in fields(Settings)}))

    def but(self, **changes) -> "Settings":
        """These settings with `changes` (a TypeError names a key that is no setting)."""
        return replace(self, **changes)


def job_config(experiment, config_dir=CONFIG_DIR, **overrides) -> "JobConfig":
    """A job as Hydra composes it: config/job.yaml's defaults, `overrides`, and the experiment."""
    merged = OmegaConf.merge(OmegaConf.structured(JobConfig),
                             yaml_layer(Path(config_dir, "job.yaml")), overrides)
    merged.experiment = OmegaConf.structured(experiment)
    return OmegaConf.to_object(merged)


def register_configs(experiment_configs: dict[str, type]) -> None:
    cs = ConfigStore.instance()
    cs.store(name="job_schema", node=JobConfig)
    for name, node in experiment_configs.items():
        cs.store(group="schema/experiment", name=name, node=node)
