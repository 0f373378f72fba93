"""What reproduces a file: code version, packages, config, device, and when."""

from __future__ import annotations

import functools
import hashlib
import json
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

PACKAGES = ("torch", "triton", "numpy", "pandas", "pyarrow", "hydra-core", "omegaconf",
            "snakemake", "seaborn", "nvidia-ml-py")


def git_state(cwd: str | Path = ".") -> dict:
    """Commit and whether the tree had uncommitted changes; empty outside a git checkout."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
    try:
        return {"commit": git("rev-parse", "HEAD"),
                "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.SubprocessError):
        return {"commit": "", "dirty": None}


def tree_hash(root: Path) -> str:
    """A hash of the files under `root` (each relative path and its bytes, in codepoint order, not
    the locale's), __pycache__ left out."""
    files = sorted((f.relative_to(root).as_posix(), f) for f in Path(root).rglob("*")
                   if f.is_file() and "__pycache__" not in f.parts)
    h = hashlib.sha256()
    for name, f in files:
        h.update(name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


@functools.cache
def code_hash() -> str:
    """This package's files as they ran: what ran where .git lags the tree, has uncommitted
    changes, or is absent (a copy, a wheel)."""
    return tree_hash(Path(__file__).resolve().parents[1])


def package_versions() -> dict:
    versions = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


def config_hash(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]
