"""The first screen through the whole aggregate chain (fit, knees, claims): what went wrong
apart from what was expected. The unit twin holds the rest."""

from experiments.analysis import compute
from experiments.report import glance
from tests.unit.report.test_report_first_screen import _ds


def test_what_went_wrong_holds_only_the_unexpected():
    ds = _ds()
    ceilings, _, claims = compute.judged(ds, [])
    first = glance.glance(ds, ceilings, claims, [])
    (s,) = first["systems"]
    assert "1 error (launch)" in s["problems"]
    assert not any("oom" in p or "unsupported" in p for p in s["problems"])
    oom = sum(r["status"] == "oom" for r in ds.rows.to_dict("records"))
    assert f"{oom} oom (matmul)" in s["notes"] and "1 unsupported (matmul)" in s["notes"]
    assert first["references"] == []  # a run alone: nothing is a reference
