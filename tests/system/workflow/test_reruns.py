"""Every input that shapes a measurement reruns exactly the jobs it touches, and nothing else does:
the composed defaults (config/job.yaml, config/experiment/<name>.yaml), the code of the
experiment and of the core it imports, a workload's target and the user's modules it imports,
the versions of the timing packages; with or without Snakemake's own records."""

from __future__ import annotations

import contextlib
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from experiments.sweep import triggers

from tests.workflow_copy import copy_repo, python, snakemake

SWEEP = {"bandwidth": {"dtypes": ["float32"], "cpu": {"sizes": [16384]}},
         "timing": {"dtypes": ["float32"], "cpu": {"kernel_sizes": [32]}}}
WORKLOADS = {"mlp": {"target": "experiments.models:make_mlp", "dtypes": ["float32"],
                     "cpu": {"batches": [1], "max_copies": 2}}}
BANDWIDTH = "bandwidth/float32.parquet"
TIMING = "timing/float32.parquet"
WORKLOAD = "workload/mlp-float32.parquet"
ALL = {BANDWIDTH, TIMING, WORKLOAD}

pytestmark = pytest.mark.system  # whole Snakemake dry runs: minutes


def planned(repo: Path, env: dict | None = None) -> set[str]:
    """The measurement files a dry run would (re)write, as experiment/case.parquet."""
    plan = python(repo, "-m", "snakemake", "-n", "--cores", "2", env=env)
    assert plan.returncode == 0, plan.stdout[-3000:]
    return set(re.findall(r"output: \S*measurements/ci/cpu/(\w+/[\w-]+\.parquet)", plan.stdout))


@contextlib.contextmanager
def edited(path: Path, old: str, new: str):
    """`path` with `old` replaced by `new` (once), restored afterwards."""
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))
    try:
        yield
    finally:
        path.write_text(text)


def test_each_input_that_shapes_a_job_reruns_exactly_its_jobs(tmp_path):
    repo = copy_repo(tmp_path / "repo", experiments=SWEEP, workloads=WORKLOADS)
    run = snakemake(repo, "--cores", "2", timeout=600)
    assert run.returncode == 0, run.stdout[-4000:]
    assert planned(repo) == set()

    line = "from __future__ import annotations"
    code = (line, line + "\nEDITED = 1")
    cases = [  # (what changes, file, old, new, the jobs it must rerun)
        ("a job default", "config/job.yaml", "retries: 1", "retries: 2", ALL),
        ("a comment in job.yaml", "config/job.yaml", "retries: 1", "retries: 1  # edited", set()),
        ("an experiment default", "config/experiment/timing.yaml", "launch_samples: 20",
         "launch_samples: 21", {TIMING}),
        ("a comment in its yaml", "config/experiment/timing.yaml", "launch_samples: 20",
         "launch_samples: 20  # edited", set()),
        ("the experiment's code", "experiments/timing.py", *code, {TIMING}),
        ("the core it imports", "experiments/core/timer.py", *code, ALL),
        ("a workload's target", "experiments/models/__init__.py", *code, {WORKLOAD}),
        ("the workload experiment", "experiments/workload.py", *code, {WORKLOAD}),
        ("a comment in the core", "experiments/core/timer.py", line, line + "  # edited", set()),
        ("another experiment's code", "experiments/matmul.py", *code, set()),
        ("the sweep's machinery", "experiments/sweep/forkserver.py", *code, set()),
    ]
    for what, name, old, new, expected in cases:
        with edited(repo / name, old, new):
            assert planned(repo) == expected, what
        assert planned(repo) == set(), f"{what}, undone"

    # a timing package's version: a torch whose metadata says it is another release
    fake = tmp_path / "fake" / "torch-0.0.1.dist-info"
    fake.mkdir(parents=True)
    (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 0.0.1\n")
    assert planned(repo, env={"PYTHONPATH": str(fake.parent)}) == ALL

    # the case, measured for real: bandwidth's default ops 5 -> 2 re-measures its file
    path = repo / "config/experiment/bandwidth.yaml"
    path.write_text(re.sub(r"^ops: .*$", "ops: [copy, add]", path.read_text(), flags=re.M))
    assert planned(repo) == {BANDWIDTH}
    run = snakemake(repo, "--cores", "2", timeout=600)
    assert run.returncode == 0, run.stdout[-4000:]
    assert set(pd.read_parquet(repo / "results/measurements/ci/cpu" / BANDWIDTH).op) == {
        "copy", "add"}
    assert planned(repo) == set()


def test_a_workload_target_and_a_timing_package_change_the_digest(tmp_path, monkeypatch):
    target = tmp_path / "model.py"
    target.write_text("def make_x(batch, dtype, device, generator):\n    return None\n")
    one = triggers.job_digest("workload", str(triggers.PACKAGE.parent / "config"),
                              f"{target}:make_x")
    target.write_text("def make_x(batch, dtype, device, generator):\n    return 1\n")
    triggers._parse.cache_clear(), triggers._code.cache_clear(), triggers.job_digest.cache_clear()
    two = triggers.job_digest("workload", str(triggers.PACKAGE.parent / "config"),
                              f"{target}:make_x")
    assert one != two
    monkeypatch.setattr(triggers, "versions", lambda: {"torch": "0.0.1"})
    triggers.job_digest.cache_clear()
    assert triggers.job_digest("workload", str(triggers.PACKAGE.parent / "config"),
                               f"{target}:make_x") != two


HELPER_TARGET = '''import helper_layers


def make_net(batch, dtype, device, generator):
    import torch
    layer = helper_layers.layer().to(device=device, dtype=dtype)
    x = torch.randn(batch, 8, device=device, dtype=dtype, generator=generator)
    return layer, (x,)
'''
HELPER = "def layer():\n    import torch\n    return torch.nn.Linear(8, 8)\n"


def test_a_helper_the_target_imports_and_settings_without_snakemakes_records_rerun(tmp_path):
    """Issue 59: editing a module a workload target imports reruns its jobs; with .snakemake/
    gone, a changed job.yaml setting still reruns every job (the stamp files' times)."""
    workloads = {"net": {"target": "net_target.py:make_net", "dtypes": ["float32"],
                         "cpu": {"batches": [1], "max_copies": 2}}}
    repo = copy_repo(tmp_path / "repo", experiments={"bandwidth": SWEEP["bandwidth"]},
                     workloads=workloads)
    (repo / "net_target.py").write_text(HELPER_TARGET)
    (repo / "helper_layers.py").write_text(HELPER)
    run = snakemake(repo, "--cores", "2", timeout=600)
    assert run.returncode == 0, run.stdout[-4000:]
    assert planned(repo) == set()
    net = "workload/net-float32.parquet"
    with edited(repo / "helper_layers.py", "Linear(8, 8)", "Linear(8, 8, bias=False)"):
        assert planned(repo) == {net}
    assert planned(repo) == set()
    shutil.rmtree(repo / ".snakemake")
    with edited(repo / "config/job.yaml", "retries: 1", "retries: 2"):
        assert planned(repo) == {BANDWIDTH, net}
