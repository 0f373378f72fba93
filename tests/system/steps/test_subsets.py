"""No aggregate step raises on any subset of points: a busy machine drops some, flags others
contended or noisy, and the run must still fit what it can, say "not fitted" or "not measurable
here" with the reason for the rest, and render the report (tests/subsets.py says the cuts).

hypothesis draws the cuts; the cases it shrank to are kept below as plain tests."""

from __future__ import annotations

import os

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments.analysis import dataset
from experiments.analysis.claims import CLAIMS, FAILS, HOLDS, NOT_MEASURABLE
from tests.subsets import ANALYSIS, MODES, SOURCES, Cut, check_outputs, groups, run_steps

pytestmark = pytest.mark.system  # each example runs the aggregate steps: seconds

# more examples by hand: ROOFLAB_SUBSET_EXAMPLES=300 pytest tests/system/steps/test_subsets.py
EXAMPLES = int(os.environ.get("ROOFLAB_SUBSET_EXAMPLES", "0"))
SETTINGS = dict(deadline=None, derandomize=not EXAMPLES, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

CUT = st.builds(Cut, st.sampled_from(MODES), st.integers(-3, 3), st.integers(0, 2**16))


def cuts_of(source: str):
    """A few groups cut (the shrunk cases look like this), or every group cut at once."""
    keys = groups(source)
    few = st.dictionaries(st.sampled_from(keys), CUT, max_size=4)
    every = st.fixed_dictionaries({k: CUT for k in keys})
    return st.one_of(few, every)


SOURCE_CUTS = st.fixed_dictionaries({}, optional={s: cuts_of(s) for s in SOURCES}).filter(bool)


def judged_without_rows(files) -> pd.DataFrame:
    """Claims judged (holds / does not hold) on a system where none of the experiments the claim
    reads has an ok row left: a verdict from no data."""
    ds = dataset.load(files.dataset)
    good = dataset.ok(ds.rows)
    have = set(zip(good.system, good.experiment))
    cl = pd.read_parquet(files.claims)
    judged = cl[cl.verdict.isin([HOLDS, FAILS])]
    return judged[[not any((s, e) in have for e in CLAIMS[c].experiments)
                   for c, s in zip(judged.claim, judged.system)]]


@settings(max_examples=EXAMPLES or 12, **SETTINGS)
@given(cuts=SOURCE_CUTS)
def test_analysis_steps_never_raise_on_any_subset(tmp_path_factory, cuts):
    files = run_steps(tmp_path_factory.mktemp("cut"), cuts, ANALYSIS)
    check_outputs(files, ANALYSIS)
    assert judged_without_rows(files).empty


@settings(max_examples=EXAMPLES // 10 or 3, **SETTINGS)
@given(cuts=SOURCE_CUTS)
def test_every_step_and_the_report_on_any_subset(tmp_path_factory, cuts):
    from experiments.steps.pipeline import AFTER_COLLECT
    files = run_steps(tmp_path_factory.mktemp("cut"), cuts, AFTER_COLLECT)
    check_outputs(files, AFTER_COLLECT)


# ---- the cases hypothesis found, shrunk ---------------------------------------------------

ALL_STEPS = ("roofline", "decode", "claims", "placements", "interactive", "figures", "report")
CPU = ("vm", "cpu")


def test_shrunk_timing_without_all_three_clocks(tmp_path):
    """Half the H200's timing rows dropped: no kernel size keeps all three clocks, and C5 and
    C6 say so instead of breaking on an empty table."""
    cuts = {"h200": {("h200", "cuda:0", "timing", "float32"): Cut("drop_some", 0, 1)}}
    files = run_steps(tmp_path, cuts, ANALYSIS)
    check_outputs(files, ANALYSIS)
    cl = pd.read_parquet(files.claims)
    c6 = cl[(cl.claim == "C6") & (cl.system == "NVIDIA H200 @ h200 [published:h200]")].iloc[0]
    assert c6.verdict == NOT_MEASURABLE and "all three clocks" in c6.reason, c6.reason


@pytest.mark.parametrize("cuts", [
    # a CPU GEMM dtype with one clean point, at the sweep's largest size (the crash)
    {"run": {(*CPU, "matmul", "float32"): Cut("contended_but_one", -1)}},
    {"run": {(*CPU, "matmul", "float32"): Cut("only_one", -1)}},
], ids=["gemm-one-clean-point-at-largest-size", "gemm-one-point-left"])
def test_shrunk_cases(tmp_path, cuts):
    files = run_steps(tmp_path, cuts, ALL_STEPS)
    check_outputs(files, ALL_STEPS)
    c = pd.read_parquet(files.ceilings)
    gemm = c[(c.ceiling == "matrix_flops") & (c.dtype == "float32")
             & c.system.str.endswith("@ vm")]
    assert len(gemm) == 1 and gemm.value.isna().all(), gemm
    cl = pd.read_parquet(files.claims)  # C18 reads the float32 GEMM ceiling for prefill
    c18 = cl[(cl.claim == "C18") & cl.system.str.endswith("@ vm")].iloc[0]
    assert "no float32 GEMM ceiling" in c18.measurement, c18.measurement
