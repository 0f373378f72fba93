"""The measurement core: the row schema, atomic writes, config errors, devices and budgets (the
timer: test_timer.py)."""

from pathlib import Path

import pytest
from experiments.core.runner import Unsupported


@pytest.mark.system
def test_bad_out_on_the_command_line_measures_nothing(tmp_path):
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "experiments", "experiment=bandwidth",
                          "device=cpu", f"out={tmp_path}"], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[3])
    assert run.returncode == 2, run.stderr[-2000:]
    assert f"bad config: out='{tmp_path}' is a directory" in run.stderr
    assert "bandwidth copy" not in run.stdout + run.stderr  # no point was measured


def test_a_sweep_plans_no_job_whose_every_row_could_only_say_why_not(run_experiment):
    """NOT_ON / NOT_ON_DTYPES leave out of a sweep the jobs that could measure nothing on a kind
    of device; each is checked against what the job writes when run by hand."""
    from experiments import all_experiments, planned
    from experiments.matmul import cpu_supports

    gpu_only = [n for n, m in all_experiments().items() if "cpu" in getattr(m, "NOT_ON", ())]
    assert sorted(gpu_only) == ["collectives", "l1", "launch", "peer_copy", "transfer"]
    for name in gpu_only:
        assert not planned(name, "cpu", "float32") and planned(name, "cuda", "float32")
        rows = run_experiment(name, "float32")
        assert len(rows) and (rows.status == "not_applicable").all(), (name, set(rows.status))
    for dtype in ("tf32", "float8_e4m3"):
        assert not planned("matmul", "cpu", dtype) and planned("matmul", "cuda", dtype)
        with pytest.raises(Unsupported):
            cpu_supports(dtype, flags=set())
    # a dtype some CPUs have stays planned: measured there, a row saying why elsewhere
    assert planned("matmul", "cpu", "float16") and planned("intensity", "cpu", "bfloat16")
