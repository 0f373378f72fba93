"""The built wheel carries the workflow (Snakefile, config/, workflow/, published sets) and finds
it from any directory: built from a copy of the repository, unpacked, imported from elsewhere."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.workflow_copy import ROOT

pytestmark = pytest.mark.system  # slow: see docs/development.md

# What a wheel is built from: the tracked top level, without results other than the published.
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "Snakefile", "environment.yml", "experiments",
           "config", "workflow", "results/published")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(ROOT / name, src / name)
    dist = tmp_path_factory.mktemp("dist")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", dist,
                            src], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    (path,) = dist.glob("rooflab-*.whl")
    return path


def test_wheel_holds_every_module_and_the_workflow_files(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "experiments").rglob("*.py")}
    assert modules <= names, f"not in the wheel (list the package in pyproject.toml): " \
                             f"{sorted(modules - names)}"
    shipped = {f"experiments/_workflow/{p.relative_to(ROOT).as_posix()}"
               for part in ("config", "workflow", "results/published")
               for p in (ROOT / part).rglob("*") if p.is_file() and p.suffix != ".html"}
    shipped |= {"experiments/_workflow/Snakefile", "experiments/_workflow/environment.yml"}
    assert shipped <= names, sorted(shipped - names)
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt")))
    assert b"rooflab = experiments.cli.rooflab:main" in entry


def test_unpacked_wheel_finds_its_files_from_another_directory(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = os.environ | {"PYTHONPATH": str(site)}  # the unpacked wheel, not this checkout
    code = ("import experiments.core.paths as p, experiments.core.config as c; "
            "print(p.workflow_root()); print(c.CONFIG_DIR)")
    where = subprocess.run([sys.executable, "-c", code], cwd=elsewhere, env=env,
                           capture_output=True, text=True)
    assert where.returncode == 0, where.stderr[-3000:]
    root = site / "experiments" / "_workflow"
    assert where.stdout.split() == [str(root), str(root / "config")]

    # the packaged workflow plans the quick sweep there: its config, rules and published sets
    # resolve beside its Snakefile, results in the working directory
    plan = subprocess.run([sys.executable, "-m", "experiments.cli.rooflab", "run", "--quick", "--cores",
                           "1", "-n", "-p", "--config", "devices=[cpu]"],
                          cwd=elsewhere, env=env, capture_output=True, text=True)
    out = plan.stdout + plan.stderr
    assert plan.returncode == 0, out[-4000:]
    assert f"--snakefile {root / 'Snakefile'}" in out
    assert f"--published {root / 'results/published/h200/measurements.parquet'}" in out
    assert f"--datasheets {root / 'config/datasheets.yaml'}" in out
    assert "results/measurements.parquet" in out and "experiment=bandwidth" in out
    assert "point_budget_s=0.05" in out  # the quick preset's budget
