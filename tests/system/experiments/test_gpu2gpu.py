"""GPU to GPU on the CPU: the not-measurable rows (CPU, one GPU), the pairs, the link types, the
bus-bandwidth arithmetic against nccl-tests, the rank machinery (two gloo ranks on the CPU), the
copy kernel (Triton's interpreter), the figures and the report section on synthetic rows."""

from __future__ import annotations

import pytest

from experiments import collectives
from experiments import experiment_config
from experiments.analysis.dataset import from_rows
from experiments.report import figures
from tests.unit.experiments.test_gpu2gpu import _inputs, _row, synthetic  # noqa: F401 (fixtures)


@pytest.mark.system
def test_two_ranks_on_the_cpu_time_and_check_every_collective():
    """The ranks' machinery (spawn, FileStore, one agreed plan, rank 0's rows) with gloo."""
    cfg = experiment_config("collectives", sizes=[1024, 65536], timeout_s=120)
    spec = {"backend": "gloo", "indices": [], "ops": list(collectives.OPS), "sizes": cfg.sizes,
            "dtype": "float32", "seed": 0, "point_budget_s": 0.02, "cv_threshold": 0.1,
            "contention_threshold": 0.1, "timeout_s": 60, "versions": {}}
    rows = collectives.measure_group(cfg, spec, 2)
    assert len(rows) == 6
    for r in rows:
        assert r["status"] == "ok" and r["check_passed"], r
        assert r["samples"] >= 5 and r["time_s"] > 0 and r["params"]["world_size"] == 2
        p = r["params"]
        assert p["algbw_Bps"] == pytest.approx(r["bytes"] / r["time_s"])
        assert p["busbw_Bps"] == pytest.approx(p["algbw_Bps"] * collectives.bus_factor(r["op"], 2))
    assert all(r["rel_error"] == 0 for r in rows if r["op"] == "all_gather")


@pytest.mark.system
def test_ranks_that_fail_leave_error_rows_with_the_reason():
    cfg = experiment_config("collectives", sizes=[1024], ops=["all_reduce"], timeout_s=60)
    spec = {"backend": "no_such_backend", "indices": [], "ops": ["all_reduce"], "sizes": [1024],
            "dtype": "float32", "seed": 0, "point_budget_s": 0.02, "cv_threshold": 0.1,
            "contention_threshold": 0.1, "timeout_s": 30, "versions": {}}
    rows = collectives.measure_group(cfg, spec, 2)
    assert [r["status"] for r in rows] == ["error"] and rows[0]["message"]


# --- analysis on synthetic rows ----------------------------------------------------------------


def test_copy_matrix_and_figures_from_rows(tmp_path):
    rows = synthetic()
    m = figures.copy_matrix(from_rows(rows).rows)
    assert sorted(zip(m.src, m.dst)) == [(0, 1), (1, 0)]
    assert m.gbps.tolist() == pytest.approx([380.0, 380.0])
    status = figures.draw_all(_inputs(rows), tmp_path)
    assert status["peer_copy"] is None and status["collectives"] is None, status
    assert (tmp_path / "peer_copy.svg").stat().st_size > 1000
