"""A job's progress: one start line with its point count and an estimate, a bar only in a terminal.
(That each experiment's count is the rows it writes: the run_experiment fixture checks it.)"""

from __future__ import annotations

import io
import logging
import sys

from tests.conftest import MODULES, compose_job
from experiments.core import harness
from experiments.core.runner import run_job

SWEEP = ["experiment.sizes=[16384,65536]", "experiment.ops=[copy,triad]"]  # 2 x 2 = 4 points


class Terminal(io.StringIO):
    def isatty(self):
        return True


def _run(tmp_path, monkeypatch, stderr):
    monkeypatch.setattr(sys, "stderr", stderr)
    job = compose_job(["experiment=bandwidth", "device=cpu", "dtype=float32", *SWEEP,
                       "point_budget_s=0.02", f"out={tmp_path / 'bw.parquet'}"])
    run_job(job, MODULES["bandwidth"])


def test_start_line_names_the_job_its_points_and_says_the_time_is_an_estimate(
        tmp_path, monkeypatch, caplog):
    with caplog.at_level(logging.INFO, logger="rooflab"):
        _run(tmp_path, monkeypatch, io.StringIO())
    first = caplog.messages[0]
    assert first.startswith("bandwidth on cpu in float32: 4 points, at most about 1 s")
    assert "an estimate: 4 points x point_budget_s 0.02 s" in first


def test_start_line_counts_the_points_that_sample_longer_than_the_budget():
    """A CPU's DRAM-window points sample dram_steady_s, a CPU GEMM steady_s: the estimate adds
    them (experiments' sampling_s), and says that some points sample longer."""
    from types import SimpleNamespace

    import torch

    from experiments.core.runner import start_line
    job = compose_job(["experiment=matmul", "device=cpu", "dtype=float32", "point_budget_s=0.15",
                       "experiment.sizes=[64,128,256,512]", "experiment.steady_s=30"])
    from experiments.core.config import Settings
    cpu = SimpleNamespace(device=torch.device("cpu"), dtype="float32",
                          settings=Settings.defaults().but(point_budget_s=0.15))
    seconds = harness.sampling_s(MODULES["matmul"], job.experiment, cpu)
    assert seconds == 4 * 30
    line = start_line("matmul", "cpu", "float32", 4, 0.15, seconds)
    assert "at most about 2 min" in line and "some sampling longer" in line
    assert "at most about 1 s" in start_line("matmul", "cpu", "float32", 4, 0.15, 0.3)
    cuda = SimpleNamespace(device=torch.device("cuda"), dtype="float32",
                           settings=Settings.defaults().but(point_budget_s=0.4))
    assert harness.sampling_s(MODULES["matmul"], job.experiment, cuda) == 4 * 0.4


def test_bar_only_in_a_terminal(tmp_path, monkeypatch):
    piped = io.StringIO()  # Snakemake's jobs: stderr is a file, no bar
    _run(tmp_path, monkeypatch, piped)
    assert "point/s" not in piped.getvalue() and "4/4" not in piped.getvalue()

    terminal = Terminal()
    _run(tmp_path, monkeypatch, terminal)
    assert "bandwidth cpu float32" in terminal.getvalue() and "4/4" in terminal.getvalue()


def test_the_device_is_free_before_the_file_is_written(tmp_path, monkeypatch):
    """The next job waiting for the GPU starts as soon as the points are measured: the lock is
    released before the table is built and written, and the provenance read before it is taken."""
    from contextlib import contextmanager

    from experiments.core import runner

    held, seen = [], []
    real_claim, real_write, real_git = runner.claim_device, runner.write_atomic, runner.git_state

    @contextmanager
    def claim(*args, **kwargs):
        with real_claim(*args, **kwargs) as dev:
            held.append(True)
            try:
                yield dev
            finally:
                held.pop()

    monkeypatch.setattr(runner, "claim_device", claim)
    monkeypatch.setattr(runner, "write_atomic",
                        lambda *a: (seen.append(("write", bool(held))), real_write(*a))[1])
    monkeypatch.setattr(runner, "git_state", lambda: (seen.append(("git", bool(held))),
                                                      real_git())[1])
    _run(tmp_path, monkeypatch, io.StringIO())
    assert seen == [("git", False), ("write", False)]
    assert (tmp_path / "bw.parquet").is_file()
