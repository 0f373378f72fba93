"""What shapes a job's measurement besides its command line, as one digest: a rerun trigger.

Snakemake reruns a job when its params change (workflow/rules/common.smk, job_inputs). The
command line holds the sweep's own values; this digest covers the rest, so that a change of any
of them re-measures exactly the jobs it touches:

* the job's composed defaults: config/job.yaml and config/experiment/<name>.yaml, as parsed
  values (a comment edit reruns nothing);
* the code the job runs: the experiment's module and every `experiments` module it imports,
  transitively, plus the entry point's (as parsed code: comments and formatting do not count).
  Other experiments' modules do not count, nor the sweep's own machinery (fork server, checks);
* a workload's target: its module or file;
* the versions of the packages that time it (TIMING_PACKAGES), read without importing them.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
from importlib import metadata
from pathlib import Path

import yaml

from experiments import experiment_names
from experiments.core.paths import PACKAGE

TIMING_PACKAGES = ("torch", "triton", "numpy", "nvidia-ml-py")
ENTRY = "experiments.__main__"  # `python -m experiments`: what every job runs first
# Imported by the entry point but shaping no measurement (the fork server, the checks, the
# `place` command): editing them reruns nothing.
NOT_MEASURING = ("experiments.sweep", "experiments.cli")


def module_file(name: str) -> Path | None:
    """The source file of an `experiments` module (a package's __init__.py), or None."""
    parts = name.split(".")[1:]
    base = PACKAGE.joinpath(*parts)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


@functools.lru_cache(maxsize=None)
def _parse(path: Path) -> ast.Module | None:
    """A file's parsed code, once per run (every job shares the core's files)."""
    try:
        return ast.parse(path.read_text(), str(path))
    except SyntaxError:  # the job will say so
        return None


@functools.lru_cache(maxsize=None)
def _imports(name: str, path: Path) -> frozenset[str]:
    """The `experiments` modules a file imports, anywhere in it (inside functions too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(_parse(path) or ast.Module(body=[], type_ignores=[])):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}  # `from pkg import submodule`
    return frozenset(m for m in found if m.split(".")[0] == "experiments" and module_file(m))


def code_closure(roots: tuple[str, ...], exclude: tuple[str, ...] = ()) -> list[Path]:
    """Source files of `roots` and of every `experiments` module they import, transitively, with
    each module's parent packages (their __init__ runs first); modules under `exclude` skipped."""
    seen: dict[str, Path] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen or any(name == x or name.startswith(x + ".") for x in exclude):
            continue
        path = module_file(name)
        if path is None:
            continue
        seen[name] = path
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        todo += sorted(_imports(name, path))
    return sorted(set(seen.values()))


@functools.lru_cache(maxsize=None)
def _code(path: Path) -> str:
    """The code as parsed (comments and layout do not count); the text where it does not parse."""
    tree = _parse(path)
    return hashlib.sha256((ast.dump(tree) if tree else path.read_text()).encode()).hexdigest()


def _yaml(path: Path):
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return path.read_text() if path.is_file() else None


def versions(packages=TIMING_PACKAGES) -> dict:
    out = {}
    for name in packages:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def target_file(target: str) -> Path | None:
    """A workload target's source: module:fn (found, not imported) or path/to/file.py:fn."""
    where = target.rpartition(":")[0]
    if where.endswith(".py"):
        return Path(where) if Path(where).is_file() else None
    try:
        spec = importlib.util.find_spec(where)
    except (ImportError, ValueError):
        return None
    return Path(spec.origin) if spec and spec.origin and spec.origin.endswith(".py") else None


@functools.lru_cache(maxsize=None)
def job_digest(experiment: str, config_dir: str, target: str = "") -> str:
    """The digest of everything but the command line that shapes a job of `experiment` (a
    workload job: also its `target`). Cached: Snakemake asks once per job, the answer is per
    experiment, and a run's inputs do not change under it (a later run asks again)."""
    others = tuple(f"experiments.{n}" for n in experiment_names() if n != experiment)
    files = code_closure((ENTRY, f"experiments.{experiment}"), NOT_MEASURING + others)
    extra = target_file(target) if target else None
    parts = {
        "defaults": [_yaml(Path(config_dir, "job.yaml")),
                     _yaml(Path(config_dir, "experiment", f"{experiment}.yaml"))],
        "code": {str(p.relative_to(PACKAGE.parent)): _code(p) for p in files},
        "target": _code(extra) if extra else None,
        "versions": versions(),
    }
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
