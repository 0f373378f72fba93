"""Every ceiling's interval is a promise about a repeat run: no narrower than the run-to-run floor
of its device kind and kind of ceiling (plateaus.RUN_TO_RUN, measured by repeating the sweep:
docs/benchmarks.md). Whether repeats fall inside is measured by bench/coverage.py."""

import math

import pytest

from tests import analysis_fixtures as fx
from experiments.analysis import dataset, plateaus, roofline


@pytest.mark.parametrize("kind", ["cpu", "cuda"])
@pytest.mark.parametrize("ceiling", sorted(plateaus.FAMILY))
def test_a_zero_width_interval_is_widened_to_the_floor(kind, ceiling):
    floor = plateaus.RUN_TO_RUN["cpu" if kind == "cpu" else "gpu"][plateaus.FAMILY[ceiling]]
    assert floor > 0  # every kind of ceiling has a measured floor
    c = plateaus.repeatable({"ceiling": ceiling, "value": 100.0, "ci_low": 100.0,
                             "ci_high": 100.0}, kind)
    assert c["ci_low"] == pytest.approx(100 / (1 + floor))
    assert c["ci_high"] == pytest.approx(100 * (1 + floor))


def test_a_wider_interval_is_kept_and_a_missing_value_left_alone():
    wide = {"ceiling": "dram_bw", "value": 100.0, "ci_low": 10.0, "ci_high": 500.0}
    assert plateaus.repeatable(wide, "cpu") == wide
    nan = {"ceiling": "dram_bw", "value": math.nan, "ci_low": math.nan, "ci_high": math.nan}
    assert plateaus.repeatable(nan, "cpu") is nan


def test_every_fitted_ceiling_and_ridge_reaches_the_floor():
    rows = [r for rows in fx.gpu_rows(seed=0).values() for r in rows]
    ds = dataset.from_rows(rows, {"f": fx.metadata(fx.GPU, "all") | {"source": "run"}})
    c = roofline.fit(ds)
    c = c[c.value.notna()]
    assert len(c) > 10
    gpu = plateaus.RUN_TO_RUN["gpu"]
    for r in c.itertuples():
        floor = gpu.get(plateaus.FAMILY.get(r.ceiling)) or min(gpu.values())
        assert r.ci_low <= r.value / (1 + floor) * (1 + 1e-12), r
        assert r.ci_high >= r.value * (1 + floor) - 1e-12 * r.value, r
