"""Noise can only move a verdict toward "not measurable" or "does not hold": each claim's failing
fixture, its times shuffled within each experiment and multiplied by log-uniform factors in
[0.3, 3] (rates recomputed), never starts to hold. And every `fails_if` text is built from the
limits its check judges with: change a limit and the text follows."""

import math

import numpy as np
import pytest

from tests import analysis_fixtures as fx
from experiments.analysis.claims import HOLDS
from tests.unit.analysis.claims.test_analysis_claims import FAILING, verdict

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


@pytest.mark.system
@pytest.mark.parametrize("noise", list(NOISE))
@pytest.mark.parametrize("cid", sorted(FAILING, key=lambda c: int(c[1:])))
def test_noise_never_makes_a_failing_claim_hold_over_seeds(cid, noise):
    for seed in (2, 3, 4):
        r = verdict(noisy_failing(cid, noise, seed), cid)
        assert r.verdict != HOLDS, (seed, r.measurement)
