"""The L1 experiment: its kernel computes what it says, its rows count the loads, its ceiling is
fitted from the reread plateau and refused when it does not stand above L2."""

import json

import pytest
import torch

from tests import analysis_fixtures as fx
from experiments import l1
from experiments.analysis import dataset, roofline
from experiments import experiment_config
from experiments.core.config import ConfigError, Settings
from experiments.core.device import device_facts
from experiments.core.harness import Point, State
from experiments.core.runner import Context


def test_kernel_sums_each_programs_tiles_passes_times_in_interpreter():
    kernel = pytest.importorskip("experiments.kernels.reread")
    programs, block, tiles, passes = 3, 16, 3, 4  # 12 loads: 3 trips of 4, tiles cycling
    x = torch.rand(programs * tiles * block) + 0.5  # never zeros
    out = torch.full((programs, block), float("nan"))
    kernel.reread(x, out, programs=programs, span=tiles * block, block=block, passes=passes,
                  num_warps=1)
    ref = passes * x.double().reshape(programs, tiles, block).sum(1)
    torch.testing.assert_close(out.double(), ref, rtol=1e-6, atol=0)
    # a kernel that skipped a tile would be off by a whole tile's share
    assert not torch.allclose(out.double(), ref - passes * x.double().reshape(
        programs, tiles, block)[:, 0], rtol=1e-3)


def test_point_counts_every_pass_and_checks_the_result_in_interpreter():
    pytest.importorskip("experiments.kernels.reread")
    dev = torch.device("cpu")
    ctx = Context(device=dev, dtype="float32", facts=device_facts(dev),
                  settings=Settings.defaults().but(point_budget_s=0.01))
    cfg = experiment_config("l1", sizes=[256], blocks_per_sm=2, block_bytes=64,
                            bytes_per_call=1 << 14)
    p = l1.plan(cfg, sms=2, size=256, item=4)
    assert p["programs"] == 4 and p["span"] == 32 and p["block"] == 16
    assert p["passes"] * 2 % 4 == 0 and p["passes"] * p["programs"] * 128 >= 1 << 14
    row = l1.measure(State.alone(ctx, cfg, Point({}, args={"p": p})))
    assert row["check_passed"] and row["rel_error"] <= l1.TOLERANCE and row["time_s"] > 0


def test_cpu_rows_are_not_applicable_with_the_reason(run_experiment):
    rows = run_experiment("l1", "float32")
    assert len(rows) == len(experiment_config("l1").sizes)
    assert (rows.status == "not_applicable").all() and rows.message.str.contains("per SM").all()
    assert json.loads(rows.params.iloc[0])["resident_bytes_per_sm"] == 16384


def test_sizes_that_do_not_split_into_whole_tiles_are_refused():
    with pytest.raises(ConfigError, match="whole number"):
        experiment_config("l1", sizes=[3 * 4096])  # 1.5 tiles per program
    with pytest.raises(ConfigError, match="experiment.sizes"):
        experiment_config("l1", sizes=[])


def _fit(rows_by_experiment):
    rows = [r for rows in rows_by_experiment.values() for r in rows]
    ds = dataset.from_rows(rows, {"f": fx.metadata(fx.GPU, "all") | {"source": "run"}})
    return roofline.fit(ds)


def test_l1_ceiling_is_the_reread_plateau():
    table = _fit(fx.gpu_rows(seed=3))
    c = table[table.ceiling == "l1_bw"].iloc[0]
    assert c.ci_low <= fx.GPU["l1_bw"] <= c.ci_high and c.n_points == 4  # the four resident sizes
    assert c.ws_max == 131072 * fx.GPU["sms"]


def test_l1_without_a_step_above_l2_is_not_fitted():
    rows = fx.gpu_rows(seed=3)
    rows["l1"] = fx.l1_rows(fx.GPU | {"l1_bw": 1.05 * fx.GPU["l2_bw"]}, fx.np.random.default_rng(0))
    c = _fit(rows).query("ceiling == 'l1_bw'").iloc[0]
    assert c.value != c.value and "no plateau of its own" in c.note
