"""Every valid input runs, every bad one is refused in one clear line before any work (issue 23):
sizes past a row, nested --config values, read-only or full results, host labels, stray files,
published sets of another format, and a refused run leaving nothing in the temp dir."""

from __future__ import annotations

import shutil

import pytest

from tests.workflow_copy import ROOT, copy_repo, python, snakemake
from tests.unit.sweep.test_inputs import PUBLISHED  # noqa: F401 (fixtures)


@pytest.mark.system
def test_nested_config_values_run_in_the_workflow(tmp_path):
    """The issue's case: 'job={cpu: {point_budget_s: 0.5}}' gave "'0.5' is not of type 'number'"."""
    repo = copy_repo(tmp_path / "repo")
    plan = snakemake(repo, "-n", "-p", "--cores", "2", "--config",
                     "job={cpu: {point_budget_s: 0.5, retries: 2}}")
    assert plan.returncode == 0, plan.stdout[-3000:]
    assert "point_budget_s=0.5" in plan.stdout and "retries=2" in plan.stdout


@pytest.mark.system  # a `python -m experiments` process: torch and Hydra imported
def test_a_bad_host_label_is_one_line_before_hydra(tmp_path):
    run = python(ROOT, "-m", "experiments", "experiment=timing", "device=cpu",
                 "host=<script>x", f"out={tmp_path}/x.parquet", timeout=180)
    assert run.returncode == 2, run.stdout[-2000:]
    lines = run.stdout.strip().splitlines()
    assert lines[-1].startswith("rooflab: bad config: host='<script>x'") and \
        "Traceback" not in run.stdout and "LexerNoViableAltException" not in run.stdout, lines


@pytest.mark.system
def test_stray_files_are_reported_at_every_run(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    stray = repo / "results" / "measurements" / "ci" / "cpu" / "bandwidth" / "float64.parquet"
    stray.parent.mkdir(parents=True)
    shutil.copy(ROOT / PUBLISHED[2], stray)
    deep = repo / "results" / "measurements" / "extra.parquet"
    shutil.copy(ROOT / PUBLISHED[2], deep)
    for _ in range(2):  # not only when collect reruns
        plan = snakemake(repo, "-n", "--cores", "2")
        assert plan.returncode == 0, plan.stdout[-3000:]
        assert f"{stray.relative_to(repo)} ignored: no job of the sweep" in plan.stdout
        assert f"{deep.relative_to(repo)} ignored: not a job's file" in plan.stdout


@pytest.mark.system
def test_a_refused_run_leaves_nothing_in_the_temp_dir(tmp_path):
    repo = copy_repo(tmp_path / "repo", experiments={"bandwidth": {"dtypes": ["float13"]}})
    temp = tmp_path / "tmp"
    temp.mkdir()
    run = python(repo, "-m", "snakemake", "--cores", "2", env={"TMPDIR": str(temp)})
    assert run.returncode != 0 and "float13" in run.stdout
    assert [p.name for p in temp.iterdir() if p.name.startswith("rooflab-")] == []
