"""What shapes a job's measurement besides its command line, as one digest: a rerun trigger.

Snakemake reruns a job when its params change (workflow/rules/common.smk, job_inputs). The
command line holds the sweep's own values; this digest covers the rest, so that a change of any
of them re-measures exactly the jobs it touches:

* the job's composed defaults: config/job.yaml and config/experiment/<name>.yaml, as parsed
  values (a comment edit reruns nothing);
* the code the job runs: the experiment's module and every `experiments` module it imports,
  transitively, plus the entry point's (as parsed code: comments and formatting do not count).
  Other experiments' modules do not count, nor the sweep's own machinery (fork server, checks);
* a workload's target: its module or file, and every file of the user's it imports;
* the versions of the packages that time it (TIMING_PACKAGES), read without importing them.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
import os
from importlib import metadata
from pathlib import Path

import yaml

from experiments import experiment_names
from experiments.core.paths import PACKAGE
from experiments.core.store import write_text_atomic

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


def _user_module(name: str, roots: tuple[Path, ...]) -> Path | None:
    """The user's source file of module `name` under one of `roots` (not installed packages,
    not rooflab's own: those are tracked as code or versions), or None."""
    parts = name.split(".")
    for root in roots:
        base = root.joinpath(*parts)
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file() and PACKAGE not in path.resolve().parents:
                return path
    return None


def user_closure(target: Path, roots: tuple[Path, ...]) -> list[Path]:
    """A workload target's file and every file of the user's it imports, transitively, looked
    up under `roots` (where the job finds them: the working directory, the target's folder, the
    target module's sys.path entry): an edited helper module re-measures the target's jobs."""
    seen, todo = set(), [target]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        here = (path.parent, *roots)
        for node in ast.walk(_parse(path) or ast.Module(body=[], type_ignores=[])):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the file's own package folder
                    folder = path.parent.parents[node.level - 2] if node.level > 1 \
                        else path.parent
                    names = [f"{base}.{a.name}" if base else a.name for a in node.names]
                    todo += [f for n in [base] * bool(base) + names
                             if (f := _user_module(n, (folder,))) is not None]
                    continue
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            todo += [f for n in names if (f := _user_module(n, here)) is not None]
    return sorted(seen)


def target_roots(target: str) -> tuple[Path, ...]:
    """Where a job finds the modules a target imports: the working directory, and for a module
    target the sys.path entry it sits under."""
    roots = [Path.cwd()]
    where = target.rpartition(":")[0]
    path = target_file(target)
    if path is not None and not where.endswith(".py"):
        roots.append(path.parents[where.count(".")] if path.name != "__init__.py"
                     else path.parents[where.count(".") + 1])
    return tuple(roots)


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
        # relative names: the same files in a moved checkout are the same target
        "target": {os.path.relpath(p): _code(p) for p in user_closure(extra, target_roots(target))}
        if extra else None,
        "versions": versions(),
    }
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def stamp(path: str, text: str) -> str:
    """`path` holding `text`, its time moved to now only when it held something else: an input
    newer than the job's file exactly when what shapes the job changed. A new stamp is dated at
    the epoch: with no record of what shaped a job's existing file, it reruns nothing.
    Returns `path`."""
    file = Path(path)
    old = file.read_text() if file.is_file() else None
    if old != text:
        file.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(file, text)
        if old is None:
            os.utime(file, (0, 0))
    return path
