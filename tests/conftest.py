"""Shared test helpers: compose a job through Hydra's compose API and run it on the CPU."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

os.environ.setdefault("TRITON_INTERPRET", "1")  # Triton kernels run on the CPU in tests

from experiments.__main__ import CONFIG_DIR, MODULES  # noqa: E402  (registers the configs)
from experiments.core.runner import run_job  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def compose_job(overrides: list[str]):
    """The job object Hydra would build from these command-line overrides."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config_name="job", overrides=overrides)
    return OmegaConf.to_object(cfg)


@pytest.fixture
def run_experiment(tmp_path):
    """run_experiment("matmul", "float32", ["experiment.sizes=[64]"]) -> the rows it wrote."""

    def run(name: str, dtype: str, overrides: list[str] = ()) -> pd.DataFrame:
        out = tmp_path / f"{name}-{dtype}.parquet"
        job = compose_job([f"experiment={name}", "device=cpu", f"dtype={dtype}",
                           f"out={out}", "point_budget_s=0.02", *overrides])
        run_job(job, MODULES[name])
        rows = pd.read_parquet(out)
        # the count a job's progress shows up front is the rows it writes
        cpu = SimpleNamespace(device=torch.device("cpu"), devices=[torch.device("cpu")])
        planned = MODULES[name].points(job.experiment, cpu)  # None: not known up front
        assert planned is None or len(rows) == planned, (name, len(rows), planned)
        return rows

    return run


def wait_for(check, timeout: float = 15.0, poll_s: float = 0.05) -> bool:
    """Poll `check()` until it is true (True) or `timeout` seconds pass (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(poll_s)
    return False


@pytest.fixture(autouse=True)
def _fewer_knee_resamples(request, monkeypatch):
    """Unit tests judge a fixture's verdict, not the width of a knee's interval: 50 bootstrap
    resamples per knee instead of 200 (the knee bootstrap was 70 % of the claims tests' time).
    System tests keep the real count. (The published-report check needs none: the report reads
    the workloads' knees from the placements step's file, it bootstraps nothing.)"""
    if request.node.get_closest_marker("system") is None:
        from experiments.analysis import knees
        monkeypatch.setattr(knees, "N_BOOT", 50)
