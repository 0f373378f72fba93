"""Placing a callable: FLOPs and bytes from the definition, the check, the CLI, a user's file,
every bad input as a row, the ncu parser, the sweep's `workloads:` validation and jobs."""

import json
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from tests.workflow_copy import ROOT, copy_repo, snakemake
from tests.unit.placement.test_workload import (  # noqa: F401 (fixtures)
    USER, _cli, _mlp_counts, user_file)

B, D, H = 8, 16, 48


@pytest.mark.system
def test_cli_prints_the_table_and_writes_rows(tmp_path, user_file):
    out = tmp_path / "place.parquet"
    run = _cli("experiments.models:make_mlp", "--device", "cpu", "--batch", "4", "--kwargs",
               json.dumps({"d_model": D, "hidden": H}), "--out", str(out),
               "--point-budget-s", "0.02", "--ceilings", str(tmp_path / "none.parquet"),
               "--profile", "--ncu")
    assert run.returncode == 0, run.stderr[-3000:]
    for words in ("FLOPs (counted)", "bytes (compulsory)", "no fitted roofline for cpu",
                  "addmm", "counted bytes stand"):
        assert words in run.stdout, run.stdout
    rows = pd.read_parquet(out)
    assert rows.status.tolist() == ["ok"] and rows.flops.iloc[0] == _mlp_counts(4, D, H)[0]
    ops = pd.read_parquet(out.with_suffix(".ops.parquet"))
    mm = ops[ops.op == "aten::addmm"]
    assert sorted(mm.flops) == sorted([2.0 * 4 * D * H] * 2)  # each GEMM's FLOPs, per call
    # a user's own file by path; a misspelt one fails with exit 2 and the name
    run = _cli(f"{user_file}:make_double", "--device", "cpu", "--batch", "2", "--out",
               str(tmp_path / "u.parquet"), "--point-budget-s", "0.02")
    assert run.returncode == 0 and "make_double" not in run.stderr, run.stderr[-2000:]
    bad = _cli(f"{user_file}:make_dubble", "--device", "cpu")
    assert bad.returncode == 2 and "has no 'make_dubble'" in bad.stderr


@pytest.mark.system
def test_workflow_plans_one_job_per_workload_device_dtype(tmp_path):
    workloads = {"mlp": {"target": "experiments.models:make_mlp",
                         "dtypes": ["float32", "bfloat16"], "cpu": {"batches": [1, 2],
                                                                   "kwargs": {"d_model": 8}}},
                 "conv2d": {"target": "experiments.models:make_conv2d",
                            "dtypes": ["float32"]}}
    repo = copy_repo(tmp_path / "repo", workloads=workloads)
    plan = snakemake(repo, "-n", "-p", "--cores", "2")
    assert plan.returncode == 0, plan.stdout[-3000:]
    assert "measure_workload" not in plan.stdout  # an ordinary measure job
    for f in ("workload/mlp-float32.parquet", "workload/mlp-bfloat16.parquet",
              "workload/conv2d-float32.parquet"):
        assert f in plan.stdout
    assert "'++experiment.kwargs={d_model: 8}'" in plan.stdout, plan.stdout[-3000:]
    bad = copy_repo(tmp_path / "bad", workloads={"mlp": workloads["mlp"] | {
        "target": "experiments.models:make_mpl"}})
    run = snakemake(bad, "-n", "--cores", "2")
    assert run.returncode != 0 and "workloads.mlp.target" in run.stdout


@pytest.mark.system
def test_cli_shows_the_users_traceback_and_cause(tmp_path, user_file):
    run = _cli(f"{user_file}:make_raises", "--device", "cpu", "--out", str(tmp_path / "r.parquet"),
               "--point-budget-s", "0.02")
    assert run.returncode == 1
    assert f'File "{user_file}", line' in run.stderr and "in fn" in run.stderr
    assert "cause: RuntimeError: boom in the user's code (mine.py:" in run.stderr
    assert "{" not in run.stdout + run.stderr.split("Traceback")[0]  # no raw dict
    assert "timer" not in run.stdout and "nan" not in run.stdout


@pytest.mark.system
def test_cli_profile_table_is_readable_and_leaves_views_out(tmp_path):
    run = _cli("experiments.models.modules:make_linear", "--device", "cpu", "--batch", "4",
               "--kwargs", json.dumps({"d_in": 32, "d_out": 16}), "--out",
               str(tmp_path / "l.parquet"), "--point-budget-s", "0.02", "--profile")
    assert run.returncode == 0, run.stderr[-2000:]
    table = run.stdout.split("views left out):")[1]
    import re
    assert "addmm" in table and "time/call" in table
    assert re.search(r"addmm .* \d+(\.\d+)? [mµn]?s ", table) and " kB" in table  # with units
    assert "aten::t " not in table and "\nt " not in table and "e-0" not in table


@pytest.mark.system
def test_cli_touches_nothing_cuda_on_a_cpu(tmp_path):
    """Every way torch probes CUDA raises here: a CPU placement must not reach one."""
    code = textwrap.dedent(f'''
        import sys, torch
        def probed(*a, **k):
            raise SystemExit("CUDA probed")
        for name in ("is_available", "device_count", "init", "get_device_name",
                     "get_device_properties", "synchronize", "current_device"):
            setattr(torch.cuda, name, probed)
        torch.backends.cuda.is_built = lambda: False  # a CPU-only build: auto means the CPU
        from experiments.cli.place import main
        sys.exit(main(["experiments.models:make_mlp", "--batch", "2", "--kwargs",
                       '{{"d_model": 8, "hidden": 16}}', "--out", "{tmp_path / 'c.parquet'}",
                       "--point-budget-s", "0.02", "--profile"]))
    ''')
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout[-1500:] + run.stderr[-1500:]
    assert "on cpu" in run.stdout and "CUDA" not in run.stdout + run.stderr
    assert "gpuGetDeviceCount" not in run.stderr
