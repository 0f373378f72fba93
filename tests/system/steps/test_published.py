"""The committed published reports are what the code renders now (their text: figures, scripts
and the generation time aside). When this fails after a change to the report, rebuild them:
python -m experiments.steps.published results/published/h200"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from experiments.steps import published

ROOT = Path(__file__).resolve().parents[3]
REPORTS = sorted((ROOT / "results" / "published").glob("*/report.html"))


@pytest.mark.system  # renders the whole report, with its 200-resample knee bootstraps: 5-7 s
@pytest.mark.parametrize("report", REPORTS, ids=[p.parent.name for p in REPORTS])
def test_the_committed_report_is_what_the_code_renders(report):
    committed = published.text(report.read_text(encoding="utf-8"))
    again = published.text(published.rendered(report.parent))
    if committed != again:
        diff = difflib.unified_diff(committed.split(". "), again.split(". "), "committed",
                                    "rendered now", n=0, lineterm="")
        pytest.fail(f"{report.relative_to(ROOT)} is older than the code; rebuild it with "
                    f"`python -m experiments.steps.published {report.parent.relative_to(ROOT)}`"
                    "\n" + "\n".join(list(diff)[:20]))
