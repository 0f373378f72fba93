"""The committed published reports are what the code renders now (their text: figures, scripts
and the generation time aside). When this fails after a change to the report, rebuild them:
python -m experiments.steps.published results/published/h200"""

from __future__ import annotations

from experiments.steps import published


def test_text_leaves_out_figures_scripts_and_the_date():
    html = ('<p>Generated 2026-12-01 14:00 UTC</p><figure><svg><text>9</text></svg><p>x</p>'
            '</figure><script>var a = 1;</script><p>DRAM  4.29 TB/s</p>')
    assert published.text(html) == "Generated (date) DRAM 4.29 TB/s"
