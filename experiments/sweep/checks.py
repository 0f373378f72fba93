"""The sweep's checks, before Snakemake runs any job: config/config.yaml's `experiments:` and
`workloads:` against the experiment modules and their Config dataclasses."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from experiments.core.config import CONFIG_DIR, ConfigError, yaml_layer


def check_settings(where: str, config, base, settings: dict, fixed: dict | None = None,
                   skip=("name",)) -> None:
    """One device kind's overrides of an experiment: keys among its Config dataclass's fields,
    values its types and its own __post_init__ checks accept over `base` (its
    config/experiment/<name>.yaml) and `fixed` (keys the sweep sets itself). Raises ConfigError
    naming `where`, the key and what is allowed."""
    allowed = sorted(f.name for f in fields(config) if f.name not in skip)
    bad = sorted(set(settings) - set(allowed))
    if bad:
        raise ConfigError(f"{where}: unknown key {', '.join(map(repr, bad))}; "
                          f"{config.__module__.rpartition('.')[2]} has {allowed}")
    for key, value in settings.items():
        _check_keys(f"{where}.{key}", value)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(config), base, fixed or {}, settings)
        OmegaConf.to_object(merged)  # runs the dataclass's own checks
    except (OmegaConfBaseException, ValueError, TypeError) as exc:
        key = getattr(exc, "full_key", None)  # OmegaConf's type errors name the key apart
        text = str(exc).splitlines()[0]
        raise ConfigError(f"{where}: " + (f"{key}: {text}" if key else text)) from None


def _check_keys(where: str, value) -> None:
    """Keys of a mapping value (a workload's kwargs) travel as Hydra override keys: identifiers."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not (isinstance(key, str) and key.isidentifier()):
                raise ConfigError(f"{where}: key {key!r} is not a Python identifier (letters, "
                                  "digits and _, not starting with a digit)")
            _check_keys(f"{where}.{key}", item)


def check_sweep(experiments: dict, config_dir=CONFIG_DIR, kinds=("cpu", "cuda")) -> None:
    """Check the sweep's `experiments` (config/config.yaml) against the code, before any job:
    names against the experiment modules, each device kind's overrides against that experiment's
    Config dataclass over its config/experiment/<name>.yaml (check_settings). Raises ConfigError
    naming the entry, the key and what is allowed.

    The dataclasses are the one list of keys: the JSON schema cannot know them."""
    from experiments import experiment, experiment_names  # imports torch: only when checking

    if "workload" in experiments:
        raise ConfigError("experiments: 'workload' runs the entries of `workloads:` (one job per "
                          "workload); list your callables there, not under experiments")
    unknown = sorted(set(experiments) - set(experiment_names()))
    if unknown:
        raise ConfigError(f"experiments: {', '.join(map(repr, unknown))} is not an experiment; "
                          f"allowed: {sorted(set(experiment_names()) - {'workload'})}")
    for name, spec in experiments.items():
        base = yaml_layer(Path(config_dir, "experiment", f"{name}.yaml"))
        for kind in kinds:
            check_settings(f"experiments.{name}.{kind}", experiment(name).Config, base,
                           (spec or {}).get(kind) or {})


def check_workloads(workloads: dict | None, config_dir=CONFIG_DIR, kinds=("cpu", "cuda")) -> None:
    """Check the sweep's `workloads` (config/config.yaml) before any job: each target imports and
    names a factory (experiments/placement/target.py's convention), and each device kind's keys
    and values fit the workload experiment's Config (check_settings, as check_sweep). Raises
    ConfigError naming the workload and the key."""
    from experiments.placement import target as targets
    from experiments.workload import Config

    base = yaml_layer(Path(config_dir, "experiment", "workload.yaml"))
    for name, spec in (workloads or {}).items():
        spec = spec or {}
        target = spec.get("target")
        where = f"workloads.{name}"
        try:
            factory = targets.load_target(str(target))
        except targets.TargetError as exc:
            raise ConfigError(f"{where}.target: {exc}") from None
        if not targets.is_factory(factory):
            raise ConfigError(f"{where}.target={target!r} is not a factory: name it "
                              f"{targets.FACTORY_PREFIX}* (or set rooflab_factory = True) and "
                              "return (fn, args) from (batch, dtype, device, generator, **kwargs)")
        for kind in kinds:
            check_settings(f"{where}.{kind}", Config, base, spec.get(kind) or {},
                           {"workload": name, "target": target},
                           skip=("name", "workload", "target"))


def coerce_nested(value):
    """`--config` hands values nested in a mapping over as strings ('job={cpu: {point_budget_s:
    0.5}}' gives '0.5'): numbers and booleans written as such become them again. For the sweep's
    own mappings (job, experiments, workloads), where no text value looks like a number."""
    if isinstance(value, dict):
        return {k: coerce_nested(v) for k, v in value.items()}
    if isinstance(value, list):
        return [coerce_nested(v) for v in value]
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if re.fullmatch(r"[+-]?[0-9]+", text):
        return int(text)
    if re.fullmatch(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", text):
        return float(text)
    return value


def check_results(results: str) -> None:
    """The results folder takes new files: a read-only one (EROFS) or a full disk (ENOSPC) is
    refused in one line before any job, instead of as a traceback or empty job logs."""
    from experiments.core.store import unwritable

    if why := unwritable(results):
        raise ConfigError(f"results folder {results} {why}: nothing can be measured into it "
                          "(free space, or set results=<another folder>)")


def results_problem(results: str) -> str | None:
    """check_results' one line, or None where the results folder takes files."""
    try:
        check_results(results)
    except ConfigError as exc:
        return str(exc)
    return None


def stray_files(measurements: str, expected: list[str]) -> list[str]:
    """One line per file under the measurements folder that no job of this sweep writes (nor
    another host's folder holds): collect leaves it out, so say so at every run."""
    from experiments.analysis.dataset import ignored_files  # what collect leaves out, and why

    return [f"rooflab: {path} ignored: {reason}"
            for path, reason in ignored_files(measurements, [Path(p) for p in expected]).items()]


HOST_LABEL = re.compile(r"[A-Za-z0-9._-]*")  # a results folder's name, as the workflow writes it


def host_error(argv: list[str]) -> str | None:
    """Why a job's `host=` label cannot be used, in one line (Hydra's lexer error says nothing of
    what is allowed); None when it can."""
    for arg in argv:
        key, _, value = arg.partition("=")
        if key.lstrip("+") != "host":
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if not HOST_LABEL.fullmatch(value) or value in (".", ".."):
            return (f"host={value!r}: a host label holds letters, digits, '.', '_' and '-' only "
                    "(not '.' or '..'); empty: this machine's hostname")
    return None
