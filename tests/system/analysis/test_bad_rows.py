"""Rows no step may read (issue 59), through the whole aggregate chain: a tripled dataset through
the roofline, decode and claims steps, and a report of a file with bad rows (fit, knees, claims,
render). The unit twin holds the steps one at a time."""

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from experiments.analysis import dataset
from experiments.steps import pipeline
from tests.unit.analysis.test_bad_rows import COPIES, RUN, _corrupted, _results


def test_a_dataset_with_every_row_three_times_gives_the_same_ceilings_and_verdicts(
        tmp_path, capsys):
    """The issue's case: report's steps read a tripled measurements.parquet as the original
    (before, the DRAM interval collapsed to one value and verdicts moved)."""
    table = pq.read_table(RUN)
    once = _results(tmp_path / "once", table)
    thrice = _results(tmp_path / "thrice", pa.concat_tables([table] * 3))
    for files in (once, thrice):
        for step in ("roofline", "decode", "claims"):
            pipeline.run(step, files)
    for key in ("ceilings", "knees", "claims"):
        pd.testing.assert_frame_equal(pd.read_parquet(getattr(thrice, key)),
                                      pd.read_parquet(getattr(once, key)), obj=key)
    err = capsys.readouterr().err
    line = f"rooflab: {thrice.dataset}: {2 * table.num_rows} rows dropped: {COPIES}"
    assert err.count(line) == 3  # each step says it
    assert str(once.dataset) not in err
    ds = dataset.load(thrice.dataset, log=lambda msg: None)
    assert len(ds.rows) == table.num_rows
    assert ds.duplicates == [{"kept": thrice.dataset, "dropped": thrice.dataset,
                              "rows": 2 * table.num_rows}]


def test_the_report_says_which_rows_it_left_out(tmp_path, monkeypatch):
    from experiments.analysis import compute
    from experiments.report import interactive, render

    monkeypatch.setattr(interactive, "available", lambda: False)  # the plot is not the point
    path = tmp_path / "measurements" / "measurements.parquet"
    path.parent.mkdir()
    rows, why = _corrupted(path)
    table = pq.read_table(path)
    pq.write_table(pa.concat_tables([table, table.take(np.flatnonzero(~rows.bad)[:5])]), path)
    ds = dataset.load(path, log=lambda msg: None)
    ceilings, knees, claims = compute.judged(ds, [])
    html = render.render(ds, ceilings, [], tmp_path, claims, knees, compute.placed(ds, ceilings))
    assert "5 rows of measurements/measurements.parquet (repeated within it)" in html
    assert "16 rows of measurements/measurements.parquet: time_s not positive and finite (6), "\
           "measured_at in the future (4)," in html
