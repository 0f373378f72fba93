"""Run the Snakemake workflow in a throwaway copy of the repository, on a sweep that takes seconds.

Never in the checkout itself: others may be running it, and a test must not touch its results.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SWEEP = ROOT / ".ci" / "sweep.yaml"  # the CPU only, bandwidth, one dtype, two tiny sizes
PARTS = ("Snakefile", "pyproject.toml", "environment.yml", "workflow", "config", "experiments",
         "profiles")


def copy_repo(dest: Path, **overrides) -> Path:
    """The workflow in `dest`, its config/config.yaml replaced by the CI sweep (plus `overrides`).

    Replaced, not passed with --configfile: Snakemake merges a --configfile into the workflow's
    config key by key, so it cannot drop experiments; --replace-workflow-config does, but Snakemake
    9 does not hand it on to cluster jobs, which then see the full sweep.
    """
    dest.mkdir(parents=True, exist_ok=True)
    for name in PARTS:
        src = ROOT / name
        if src.is_symlink():  # profiles -> workflow/profiles: Snakemake looks for profiles/ there
            (dest / name).symlink_to(os.readlink(src))
        elif src.is_dir():
            shutil.copytree(src, dest / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(src, dest / name)
    sweep = yaml.safe_load(SWEEP.read_text()) | overrides
    (dest / "config" / "config.yaml").write_text(yaml.safe_dump(sweep, sort_keys=False))
    return dest


def snakemake(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run snakemake in `cwd`; on timeout kill its whole process group (only what it started)."""
    return python(cwd, "-m", "snakemake", *args, timeout=timeout)


def python(cwd: Path, *args: str, timeout: float = 120, env: dict | None = None
           ) -> subprocess.CompletedProcess:
    """Run this Python with `args` in `cwd` (and `env` added to the environment), stdout and
    stderr together; on timeout kill its whole process group (only what it started)."""
    env = os.environ | {"PYTHONUNBUFFERED": "1"} | (env or {})  # job logs show each row live
    proc = subprocess.Popen([sys.executable, *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"python {' '.join(args)} ran past {timeout} s:\n{out[-5000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")
