import json

import pytest
import torch

from experiments import launch
from experiments.kernels import chain, occupancy
from experiments.core.device import device_facts
from experiments.core.config import Settings
from experiments.core.harness import Point, State
from experiments.core.runner import Context
from experiments import experiment_config


def test_cpu_rows_are_not_applicable_with_the_reason(run_experiment):
    rows = run_experiment("launch", "float32", ["experiment.max_waves=1"])
    params = rows.params.map(json.loads)
    assert len(rows) == 5 + 5 * 3  # waves 0.5..1 by 1/8, then 5 warp counts x 3 wave counts
    assert (rows.status == "not_applicable").all()
    assert rows.message.str.contains("no SMs").all()
    assert list(rows.op.unique()) == ["wave_sweep", "warp_sweep"]
    assert [p["waves"] for p in params[:5]] == [0.5, 0.625, 0.75, 0.875, 1.0]
    assert sorted({p["num_warps"] for p in params}) == [1, 2, 4, 8, 16]


def test_blocks_compute_their_own_tiles_in_interpreter():
    fk = pytest.importorskip("experiments.kernels.fma_chain")
    tile, grid, iters = 64, 3, 10
    x = torch.randn(grid * tile)
    y = torch.full_like(x, float("nan"))
    fk.fma_chain(x, y, iters, chain.A, block=tile, num_warps=1)
    ref = chain.reference(x.double(), iters)
    torch.testing.assert_close(y.double(), ref, rtol=2e-6, atol=0)


def test_gpu_point_body_runs_in_interpreter():
    pytest.importorskip("experiments.kernels.fma_chain")
    dev = torch.device("cpu")
    ctx = Context(device=dev, dtype="float32", facts=device_facts(dev),
                  settings=Settings.defaults().but(point_budget_s=0.01))
    cfg = experiment_config("launch", tile=64, iters=10)
    point = Point({"params": {"grid": 3}}, args={"grid": 3, "num_warps": 2})
    row = launch.measure(State.alone(ctx, cfg, point))
    assert row["check_passed"] and row["rel_error"] <= 2e-6 and row["time_s"] > 0
    assert row["params"]["grid"] == 3 and row["params"]["resident_blocks_per_sm"] is None


def test_waves_and_grid_sizes():
    cfg = experiment_config("launch")
    waves = launch.wave_points(cfg)
    assert len(waves) == 29 and waves[0] == 0.5 and waves[-1] == 4.0 and 1.125 in waves
    assert launch.grid_size(0.5, 132, 1) == 66
    assert launch.grid_size(1.125, 132, 1) == 149  # 148.5 rounds up
    assert launch.grid_size(1.0, 132, 2) == 264
    assert launch.grid_size(0.001, 132, 1) == 1


def test_resident_blocks_follow_the_occupancy_limits():
    assert occupancy.resident_blocks(31, 0, 4) == 16  # threads: 2048 / 128
    assert occupancy.resident_blocks(80, 0, 1) == 25  # registers: 65536 / 2560 per warp
    assert occupancy.resident_blocks(16, 0, 1) == 32  # the per-SM block limit
    assert occupancy.resident_blocks(32, 50000, 4) == 4  # shared memory


@pytest.mark.parametrize("override, key", [("experiment.num_warps=3", "experiment.num_warps"),
                                           ("experiment.warps=[1,64]", "experiment.warps"),
                                           ("experiment.min_waves=0", "experiment.min_waves"),
                                           ("experiment.tile=100", "experiment.tile")])
def test_bad_config_names_the_key(run_experiment, override, key):
    with pytest.raises(ValueError, match=key):
        run_experiment("launch", "float32", [override])
