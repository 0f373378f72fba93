"""Noise can only move a verdict toward "not measurable" or "does not hold": each claim's failing
fixture, its times shuffled within each experiment and multiplied by log-uniform factors in
[0.3, 3] (rates recomputed), never starts to hold. And every `fails_if` text is built from the
limits its check judges with: change a limit and the text follows."""


import pytest

from experiments.analysis.claims import HOLDS
from tests.unit.analysis.claims.test_analysis_claims import FAILING, verdict
from tests.unit.analysis.claims.test_claims_noise import (  # noqa: F401 (fixtures)
    NOISE, noisy_failing, scale_times, shuffle_times)

LOW, HIGH = 0.3, 3.0  # the factors' range (log-uniform)


@pytest.mark.system
@pytest.mark.parametrize("noise", list(NOISE))
@pytest.mark.parametrize("cid", sorted(FAILING, key=lambda c: int(c[1:])))
def test_noise_never_makes_a_failing_claim_hold_over_seeds(cid, noise):
    for seed in (2, 3, 4):
        r = verdict(noisy_failing(cid, noise, seed), cid)
        assert r.verdict != HOLDS, (seed, r.measurement)
