"""A verdict whose evidence sits within its own run-to-run noise of the threshold is undecided: it
never reads "holds" in one run and "does not hold" in the next. Noise never makes a claim hold."""

import copy
import math

import pytest

from tests import analysis_fixtures as fx
from experiments.analysis.claims import FAILS, HOLDS, UNDECIDED
from experiments.analysis.claims.base import Result, half_width, nearest

from tests.unit.analysis.claims.test_analysis_claims import verdict


def _result(holds, margin, noise):
    return Result(holds, "", "", 0.0, "", "", 0, margin, noise, "x")


@pytest.mark.parametrize("holds, margin, noise, undecided", [
    (True, 0.05, 0.10, True),    # inside the bound, closer than the noise
    (False, -0.05, 0.10, True),  # outside, closer than the noise
    (True, 0.20, 0.10, False),
    (False, -0.20, 0.10, False),
    (True, 0.05, math.nan, False),  # no noise known: decided as before
    (True, math.nan, math.nan, False),
])
def test_a_verdict_is_undecided_only_within_its_noise(holds, margin, noise, undecided):
    assert _result(holds, margin, noise).undecided is undecided


def test_an_all_of_verdict_is_decided_by_a_clear_failure_whatever_the_others():
    assert nearest((0.01, 0.1, "close"), (-0.5, 0.1, "clear fail"))[2] == "clear fail"
    assert nearest((0.5, 0.1, "clear"), (0.01, 0.1, "close"))[2] == "close"
    assert nearest((math.nan, 0.1, "unscored"), (0.3, 0.1, "scored"))[2] == "scored"
    assert math.isnan(nearest()[0])


def test_half_width_is_the_plus_minus_share_of_the_value():
    assert half_width({"value": 100.0, "ci_low": 90.0, "ci_high": 110.0}) == pytest.approx(0.1)
    assert math.isnan(half_width(None))


def _add_one_at(ratio: float, rows=None):
    """The GPU fixture with x + 1's rate scaled so that measured / predicted reads `ratio`."""
    rows = copy.deepcopy(rows or fx.gpu_rows(seed=0))
    for r in rows["bandwidth"]:
        if r.get("op") == "add_one":
            for k in [k for k in r if k.startswith("time_s")]:
                r[k] = r[k] / ratio
    return rows


@pytest.mark.parametrize("ratio, expected", [
    (1.00, HOLDS),       # the article's case
    (0.905, UNDECIDED),  # 0.5 % inside the 0.90 bound: within B's interval and x + 1's spread
    (0.895, UNDECIDED),  # 0.5 % outside it: the same
    (0.60, FAILS),       # far outside: decided
])
def test_x_plus_one_near_its_bound_is_undecided_and_far_from_it_decided(ratio, expected):
    r = verdict(_add_one_at(ratio), "C10")
    assert r.verdict == expected, r.measurement
    if expected == UNDECIDED:
        assert "undecided: measured / predicted" in r.measurement




@pytest.mark.parametrize("ratio, spread, expected", [
    (0.40, 0.02, HOLDS),      # 20 % under the 0.5 bound: decided
    (0.48, 0.05, UNDECIDED),  # 4 % under it, each time +-5 %: within the noise
    (0.52, 0.05, UNDECIDED),  # 4 % over it: the same
    (0.52, 0.005, FAILS),     # 4 % over, each time +-0.5 %: decided
])
def test_batched_decode_near_its_bound_is_undecided_within_the_times_spread(
        ratio, spread, expected):
    """C14 on every curve's t(8) / (8 t(1)), its noise the times' own 10-90 % spread."""
    rows = fx.gpu_rows(seed=0)
    for r in rows["decode"]:
        if r.get("op") == "gemv_gemm" and r["batch"] in (1, 8):
            t1 = next(x["time_s"] for x in rows["decode"] if x.get("op") == "gemv_gemm"
                      and x["batch"] == 1 and x["n"] == r["n"] and x["dtype"] == r["dtype"])
            t = t1 if r["batch"] == 1 else 8 * ratio * t1
            r.update(time_s=t, time_s_q10=t * (1 - spread), time_s_q90=t * (1 + spread))
    r = verdict(rows, "C14")
    assert r.verdict == expected, r.measurement


def test_x_plus_one_on_a_cpu_holds_where_its_dram_is_steady(monkeypatch):
    """The CPU fixture's x + 1 is undecided only for the CPU's repeat spread of DRAM bandwidth:
    with none, it holds (the decision itself is not what makes it undecided)."""
    from experiments.analysis import plateaus

    rows = fx.cpu_rows()
    assert verdict(rows, "C10", fx.CPU).verdict == UNDECIDED
    monkeypatch.setitem(plateaus.RUN_TO_RUN, "cpu", dict.fromkeys(plateaus.RUN_TO_RUN["cpu"], 0.0))
    assert verdict(rows, "C10", fx.CPU).verdict == HOLDS
