"""What reproduces a file: code version, packages, config, device, and when."""

from __future__ import annotations

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
