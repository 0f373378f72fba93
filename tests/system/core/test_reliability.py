"""Faults provoked on purpose: a killed job, a bad file in the dataset, points past memory or past
what the device supports, noisy timings, hostile config values. Each must end in a clean state,
a row that says what happened, or an error that names the cause."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.workflow_copy import ROOT, copy_repo, snakemake

ENV = os.environ | {"PYTHONUNBUFFERED": "1"}  # a job's log shows each row as it is measured
ROW = re.compile(r"bandwidth \w+ \w+ n=\d+:")  # the runner's log line for one measured point


def leftovers(path: Path) -> list[Path]:
    """The file itself and any temp file write_atomic would leave beside it."""
    if not path.parent.exists():
        return []
    return [p for p in path.parent.iterdir() if p == path or p.name.startswith(f".{path.name}.")]


# -- a job killed mid-run ---------------------------------------------------------------------

@pytest.mark.system
def test_killed_measurement_leaves_no_partial_file(tmp_path):
    out = tmp_path / "m" / "bw.parquet"
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments", "experiment=bandwidth", "device=cpu",
         "dtype=float32", f"out={out}", "experiment.sizes=[16384,65536,262144]",
         "experiment.ops=[copy,add]", "point_budget_s=0.3"],
        cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        seen = ""
        for line in proc.stdout:  # wait for the first of six points, then kill it
            seen += line
            if ROW.search(line):
                break
        assert proc.poll() is None, f"the job ended before it could be killed:\n{seen}"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert leftovers(out) == []


def _job_pid(repo: Path, dtype: str) -> int | None:
    """PID of the `python -m experiments` process measuring `dtype` in `repo`."""
    for entry in Path("/proc").iterdir():
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            if (b"experiments" in cmd and f"dtype={dtype}".encode() in cmd
                    and Path(os.readlink(entry / "cwd")) == repo):
                return int(entry.name)
        except (OSError, ValueError):
            continue
    return None


@pytest.mark.system
def test_rerun_after_a_killed_job_does_only_what_is_missing(tmp_path):
    repo = copy_repo(tmp_path / "repo", job={"cpu": {"point_budget_s": 0.3}}, experiments={
        "bandwidth": {"dtypes": ["float32", "float16"],
                      "cpu": {"sizes": [16384, 65536, 262144], "ops": ["copy", "add"]}}})
    files = {d: repo / f"results/measurements/ci/cpu/bandwidth/{d}.parquet"
             for d in ("float32", "float16")}
    targets = [str(f.relative_to(repo)) for f in files.values()]
    args = [sys.executable, "-m", "snakemake", "--cores", "all", "--keep-going", *targets]
    run = subprocess.Popen(args, cwd=repo, env=ENV, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        # Kill whichever job starts first, once its log shows a measured point (of six).
        killed = pid = None
        end = time.monotonic() + 60
        while killed is None and time.monotonic() < end and run.poll() is None:
            for dtype in files:
                log = repo / f"results/logs/ci/cpu/bandwidth/{dtype}.log"
                if log.exists() and ROW.search(log.read_text()) and (pid := _job_pid(repo, dtype)):
                    os.kill(pid, signal.SIGKILL)
                    killed = dtype
                    break
            time.sleep(0.05)
        out, _ = run.communicate(timeout=90)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert killed, f"no job was killed:\n{out[-4000:]}"
    other = next(d for d in files if d != killed)
    assert run.returncode != 0  # the killed job failed; --keep-going ran the other to the end
    assert leftovers(files[killed]) == []
    assert files[other].exists()
    before = files[other].stat().st_mtime_ns

    dry = snakemake(repo, "--cores", "all", "-n", *targets)
    assert dry.returncode == 0, dry.stdout[-4000:]
    assert re.search(r"^measure\s+1$", dry.stdout, re.M), dry.stdout[-4000:]
    assert f"case={killed}" in dry.stdout and f"case={other}" not in dry.stdout

    rerun = snakemake(repo, "--cores", "all", *targets)
    assert rerun.returncode == 0, rerun.stdout[-4000:]
    assert "1 of 1 steps (100%) done" in rerun.stdout
    assert files[other].stat().st_mtime_ns == before
    assert (pd.read_parquet(files[killed]).status == "ok").all()


@pytest.mark.system
def test_bad_file_stops_the_workflow_collect_rule(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    bad = repo / "results/measurements/ci/cpu/bandwidth/float32.parquet"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"PAR1 not really")
    run = snakemake(repo, "--cores", "1", "results/measurements.parquet")
    assert run.returncode != 0
    log = (repo / "results/logs/aggregate/collect.log").read_text()
    assert str(bad.relative_to(repo)) in log and "not a readable Parquet file" in log
    assert not (repo / "results/measurements.parquet").exists()


NOISY, QUIET = [1.0, 1.0, 5.0, 1.0, 9.0], [1.0, 1.01, 0.99, 1.0, 1.0]


# -- hostile config values ----------------------------------------------------------------------

@pytest.mark.system
def test_spaces_and_semicolons_in_config_run_nothing(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    results = "out dir;touch pwned-results;x"
    target = f"{results}/measurements/x__touch_pwned-host/cpu/bandwidth/float32.parquet"
    run = snakemake(repo, "--cores", "all", target,
                    "--config", "host=x; touch pwned-host", f"results={results}")
    assert run.returncode == 0, run.stdout[-4000:]
    assert not (repo / "pwned-host").exists() and not (repo / "pwned-results").exists()
    rows = pd.read_parquet(repo / target)
    assert (rows.status == "ok").all() and (rows.host == "x__touch_pwned-host").all()


@pytest.mark.system
@pytest.mark.parametrize("value", [
    "host=x$(touch pwned)",
    "results=r`touch pwned`",
    "host=it's",
    'experiments={"bandwidth": {"dtypes": ["float32"], "cpu": {"ops": ["$(touch pwned)"]}}}',
])
def test_shell_active_config_fails_before_any_job(tmp_path, value):
    repo = copy_repo(tmp_path / "repo")
    run = snakemake(repo, "--cores", "all", "--config", value)
    assert run.returncode != 0
    assert "Error validating config file" in run.stdout, run.stdout[-4000:]
    assert "pwned" in run.stdout or "it's" in run.stdout  # the error shows the value
    assert not (repo / "pwned").exists() and not (repo / "results").exists()


# -- values the sweep's schema and the experiments' dataclasses refuse ------------------------

NAN, INF = float("nan"), float("inf")


def _bandwidth(**cpu):
    return {"experiments": {"bandwidth": {"dtypes": ["float32"], "cpu": cpu}}}


@pytest.mark.system
@pytest.mark.parametrize("change, message", [
    ({"host": ""}, "host"),
    ({"host": "."}, "'.'"),
    ({"host": ".."}, "'..'"),  # its job files went to results/cpu/..., outside measurements/
    ({"host": "a/b"}, "'a/b'"),
    ({"host": "h" * 256}, "is too long"),
    ({"job": {"cpu": {"point_budget_s": NAN}}}, "nan"),
    ({"job": {"cpu": {"point_budget_s": INF}}}, "inf"),
    ({"job": {"cpu": {"point_budget_s": 0}}}, "point_budget_s"),
    ({"job": {"cpu": {"cv_threshold": -1}}}, "cv_threshold"),
    ({"job": {"cpu": {"cv_threshold": NAN}}}, "nan"),
    (_bandwidth(sizes=[NAN]), "nan"),
    (_bandwidth(sizes=[0]), "sizes"),
    (_bandwidth(sizes=[-4096]), "-4096"),
    ({"experiments": {"matmul": {"dtypes": ["float32"], "cpu": {"max_call_s": NAN}}}}, "nan"),
])
def test_schema_refuses_bad_values_before_any_job(tmp_path, change, message):
    repo = copy_repo(tmp_path / "repo", **change)
    run = snakemake(repo, "--cores", "1")
    assert run.returncode != 0
    assert "Error validating config file" in run.stdout and message in run.stdout, run.stdout[-3000:]
    assert not (repo / "results").exists()


@pytest.mark.system
def test_sizes_given_with_config_on_the_command_line_are_checked_too(tmp_path):
    # Snakemake hands nested --config numbers over as strings: "16384" passes, "0" does not
    repo = copy_repo(tmp_path / "repo")
    ok = snakemake(repo, "-n", "--cores", "1", "--config",
                   "experiments={bandwidth: {dtypes: [float32], cpu: {sizes: [16384]}}}")
    assert ok.returncode == 0, ok.stdout[-3000:]
    bad = snakemake(repo, "-n", "--cores", "1", "--config",
                    "experiments={bandwidth: {dtypes: [float32], cpu: {sizes: [0]}}}")
    assert bad.returncode != 0 and "Error validating config file" in bad.stdout


@pytest.mark.system
@pytest.mark.parametrize("experiments, message", [
    # names come from the modules at experiments/' top, keys and their values from the Config dataclasses
    ({"bandwith": {"dtypes": ["float32"]}},
     "'bandwith' is not an experiment; allowed: ['bandwidth', 'collectives', 'decode'"),
    ({"bandwidth": {"dtypes": ["float32"], "cpu": {"sizez": [4096]}}},
     "experiments.bandwidth.cpu: unknown key 'sizez'; bandwidth has ['call_bytes', "
     "'dram_arrays', 'dram_steady_s', 'from_machine', 'level_points', 'ops', 'sizes']"),
    ({"intensity": {"dtypes": ["float32"], "cuda": {"n": 1.5}}},
     "experiments.intensity.cuda: n: Value '1.5' of type 'float' could not be converted"),
    ({"decode": {"dtypes": ["float32"], "cpu": {"batches": [0]}}},
     "experiments.decode.cpu: experiment.batches has [0]"),
])
def test_sweep_is_checked_against_the_experiments_code(tmp_path, experiments, message):
    repo = copy_repo(tmp_path / "repo", experiments=experiments)
    run = snakemake(repo, "--cores", "1")
    assert run.returncode != 0 and message in run.stdout, run.stdout[-3000:]
    assert not (repo / "results").exists()


# -- a YAML error names the file and the line -------------------------------------------------

@pytest.mark.system
def test_yaml_error_in_the_sweep_config_names_file_and_line(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    config = repo / "config" / "config.yaml"
    config.write_text(config.read_text() + "broken: [cpu\n")
    lines = len(config.read_text().splitlines())
    run = snakemake(repo, "-n", "--cores", "1")
    assert run.returncode != 0
    assert re.search(rf"config/config.yaml, line {lines + 1}, column \d+: not valid YAML",
                     run.stdout), run.stdout[-3000:]


@pytest.mark.system
@pytest.mark.xfail(strict=True, reason="Snakemake 9 reads a --configfile before the workflow "
                   "runs and drops the parser's message: 'Config file is not valid JSON or YAML'")
def test_yaml_error_in_a_configfile_names_file_and_line(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    extra = tmp_path / "extra.yaml"
    extra.write_text("job:\n  cpu: {point_budget_s: 0.1\n")
    run = snakemake(repo, "-n", "--cores", "1", "--configfile", str(extra))
    assert run.returncode != 0
    assert "extra.yaml" in run.stdout and "line 3" in run.stdout, run.stdout[-3000:]


@pytest.mark.system
def test_yaml_error_in_a_hydra_config_names_file_and_line(tmp_path):
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "experiments", repo / "experiments",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "config", repo / "config")
    bad = repo / "config" / "experiment" / "bandwidth.yaml"
    bad.write_text(bad.read_text() + "ops: [copy\n")
    lines = len(bad.read_text().splitlines())
    run = subprocess.run([sys.executable, "-m", "experiments", "experiment=matmul", "device=cpu",
                          f"out={tmp_path}/x.parquet"], cwd=repo, env=ENV, capture_output=True,
                         text=True)
    assert run.returncode == 2
    assert f"bad config file: {bad}, line {lines + 1}, column 1: not valid YAML" in run.stderr, run.stderr[-3000:]
    assert "Traceback" not in run.stderr and not (tmp_path / "x.parquet").exists()
