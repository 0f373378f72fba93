"""The measurement core: the row schema, atomic writes, config errors, devices and budgets (the
timer: test_timer.py)."""

from pathlib import Path

import pytest


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
