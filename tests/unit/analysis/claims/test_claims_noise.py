"""Noise can only move a verdict toward "not measurable" or "does not hold": each claim's failing
fixture, its times shuffled within each experiment and multiplied by log-uniform factors in
[0.3, 3] (rates recomputed), never starts to hold. And every `fails_if` text is built from the
limits its check judges with: change a limit and the text follows."""

import math

import numpy as np
import pytest

from tests import analysis_fixtures as fx
from experiments.analysis import claims, dataset, knees, roofline
from experiments.analysis.claims import CLAIMS, HOLDS
from tests.unit.analysis.claims.test_analysis_claims import FAILING, SHEETS, verdict

LOW, HIGH = 0.3, 3.0  # the factors' range (log-uniform)


def shuffle_times(rows: dict, rng) -> None:
    """Within each experiment, the finite times change places."""
    for exp in rows.values():
        timed = [r for r in exp
                 if isinstance(r.get("time_s"), float) and math.isfinite(r["time_s"])]
        for r, t in zip(timed, rng.permutation([r["time_s"] for r in timed])):
            r["time_s"] = float(t)


def scale_times(rows: dict, rng) -> None:
    """Each time times an independent log-uniform factor in [LOW, HIGH]."""
    for exp in rows.values():
        for r in exp:
            if isinstance(r.get("time_s"), float) and math.isfinite(r["time_s"]):
                r["time_s"] *= float(np.exp(rng.uniform(math.log(LOW), math.log(HIGH))))


NOISE = {"shuffled": [shuffle_times], "scaled": [scale_times],
         "shuffled and scaled": [shuffle_times, scale_times]}


def noisy_failing(cid: str, noise: str, seed: int) -> dict:
    rows = fx.gpu_rows(seed=0)
    FAILING[cid](rows)
    rng = np.random.default_rng(seed)
    for add in NOISE[noise]:
        add(rows, rng)
    return rows


@pytest.mark.parametrize("cid", sorted(FAILING, key=lambda c: int(c[1:])))
def test_noise_never_makes_a_failing_claim_hold(cid):
    noise = list(NOISE)[int(cid[1:]) % len(NOISE)]  # one kind each here; all kinds below
    r = verdict(noisy_failing(cid, noise, seed=1), cid)
    assert r.verdict != HOLDS, (noise, r.measurement)


# --- the texts follow the limits -----------------------------------------------------------------

@pytest.fixture(scope="module")
def gpu_system():
    rows = [r for exp in fx.gpu_rows(seed=0).values() for r in exp]
    ds = dataset.from_rows(rows, {"f": fx.metadata(fx.GPU, "all") | {"source": "run"}})
    ceilings = roofline.fit(ds)
    _, k = knees.predict(ds, ceilings)
    (system,) = claims.systems(ds, ceilings, SHEETS, k)
    return system


def _moved(value):
    if isinstance(value, tuple):
        return tuple(_moved(v) for v in value)
    return type(value)(value * 3 + 1) if isinstance(value, int) else value * 0.37 + 0.011


def test_every_timed_claim_names_its_limits():
    functional = {"C1", "C3", "C4", "C7"}  # a comparison or a check with no tolerance to state
    for c in CLAIMS.values():
        if c.check is not None and c.id not in functional:
            assert c.limits, f"{c.id} names no limits"


@pytest.mark.parametrize("cid", [c.id for c in CLAIMS.values() if c.limits])
def test_fails_if_and_threshold_are_built_from_the_limits_the_check_uses(cid, gpu_system,
                                                                         monkeypatch):
    import sys

    c = CLAIMS[cid]
    module = sys.modules[c.check.__module__]
    before_fails, before_pred = c.fails_if, c.prediction
    before = c.check(gpu_system)
    changed_fails = False
    for name in c.limits:
        old = getattr(module, name)
        monkeypatch.setattr(module, name, _moved(old))
        assert (c.fails_if, c.prediction) != (before_fails, before_pred), \
            f"{cid}: neither text reads {name}"
        changed_fails |= c.fails_if != before_fails
        try:
            after = c.check(gpu_system)
        except claims.NotMeasurable:
            after = None  # a minimum count raised past what the fixture has: it is read
        assert after is None or (after.threshold, after.holds, after.value) != (
            before.threshold, before.holds, before.value), f"{cid}: the check ignores {name}"
        monkeypatch.setattr(module, name, old)
    assert changed_fails, f"{cid}: fails_if reads none of its limits"
