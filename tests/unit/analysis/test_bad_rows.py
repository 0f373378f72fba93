"""Rows no step may read (issue 59): a row written more than once, and a row that cannot be true.
`collect` and every step after it (they read rows through dataset.load) leave them out alike,
in one line naming the file and the count."""

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from experiments.analysis import dataset
from experiments.core.store import read_metadata
from experiments.steps import pipeline

ROOT = Path(__file__).resolve().parents[3]
RUN = ROOT / "tests" / "data" / "cpu_run.parquet"  # a 2-core Zen 4 VM's run; never written to
PUBLISHED = ROOT / "results" / "published"
COPIES = "copies of rows above them in it (same run_id and content)"


def _results(folder: Path, table: pa.Table) -> pipeline.Files:
    files = pipeline.Files.under(folder)
    Path(files.ceilings).parent.mkdir(parents=True)
    pq.write_table(table, files.dataset)
    return files


# -- duplicated rows --------------------------------------------------------------------------

def test_rooflab_report_says_once_which_rows_its_steps_left_out(tmp_path, monkeypatch, capsys):
    """`rooflab report` keeps its steps' lines to itself unless one fails: the rows they left
    out it says, once, though every step reads them."""
    from experiments.cli import rooflab
    from experiments.report import summary

    table = pq.read_table(RUN)
    files = _results(tmp_path / "results", pa.concat_tables([table] * 3))
    monkeypatch.setattr(pipeline, "AFTER_COLLECT", ("roofline", "decode"))  # the first two
    monkeypatch.setattr(summary, "summary", lambda *args, **kw: "the summary")
    assert rooflab.main(["report", "--results", str(tmp_path / "results")]) == 0
    out, err = capsys.readouterr()
    line = f"rooflab: {files.dataset}: {2 * table.num_rows} rows dropped: {COPIES}"
    assert err.splitlines().count(line) == 1 and out.strip() == "the summary"


def test_collect_keeps_one_of_rows_written_twice_in_one_file(tmp_path):
    twice = tmp_path / "run.parquet"
    table = pq.read_table(RUN)
    pq.write_table(pa.concat_tables([table, table.slice(0, 10)]), twice)
    messages, out = [], tmp_path / "m.parquet"
    rows = dataset.collect([twice], out=out, log=messages.append)
    assert len(rows) == table.num_rows
    assert f"rooflab: {twice}: 10 rows dropped: {COPIES}" in messages
    assert read_metadata(out)["duplicates"] == [{"kept": str(twice), "dropped": str(twice),
                                                 "rows": 10}]


# -- rows that cannot be true -----------------------------------------------------------------

def _corrupted(path: Path) -> tuple[pd.DataFrame, dict[str, int]]:
    """The CPU run with rows made impossible (their index in `bad`) and the reasons expected."""
    table = pq.read_table(RUN)
    rows = table.to_pandas()
    ok = rows.index[rows.status == "ok"]
    dram = rows[(rows.experiment == "bandwidth") & (rows.status == "ok")].nlargest(
        3, "working_set_bytes").index
    gemm = rows[(rows.experiment == "matmul") & (rows.status == "ok")].nlargest(2, "n").index
    rest = [i for i in ok if i not in dram and i not in gemm]
    rows.loc[rest[0:3], "time_s"] *= -1
    rows.loc[rest[3:5], "time_s"] = np.nan  # ok rows that count work: they were timed
    rows.loc[rest[5], "time_s"] = np.inf
    rows.loc[rest[6], "time_s_min"] = -1e-6
    rows.loc[rest[7:11], "measured_at"] = pd.Timestamp("2099-01-01", tz="UTC")
    rows.loc[dram, "byte_per_s"] *= 1e6  # tens of GB/s read as tens of PB/s
    rows.loc[gemm, "flop_per_s"] *= 1e6
    pq.write_table(pa.Table.from_pandas(rows, schema=table.schema, preserve_index=False), path)
    rows["bad"] = rows.index.isin([*rest[:11], *dram, *gemm])
    return rows, {"time_s not positive and finite": 6, "measured_at in the future": 4,
                  "byte_per_s above 480 TB/s (100x the fastest datasheet memory)": 3,
                  "flop_per_s above 19.8 PFLOP/s (10x any datasheet's peak)": 2,
                  "a time_s_* of its spread negative or infinite": 1}


def _line(path, why: dict) -> str:
    return f"rooflab: {path}: {sum(why.values())} rows dropped: " + ", ".join(
        f"{k} ({n})" for k, n in why.items())


def test_rows_that_cannot_be_true_are_left_out_by_every_step_naming_the_file(tmp_path):
    path = tmp_path / "measurements.parquet"
    rows, why = _corrupted(path)
    messages = []
    ds = dataset.load(path, log=messages.append)
    assert messages == [_line(path, why)]
    assert ds.refused == [{"file": str(path), "rows": 16, "why": why}]
    kept = ds.rows.set_index(["experiment", "op", "dtype", "n", "measured_at"]).index
    good = rows[~rows.bad].set_index(["experiment", "op", "dtype", "n", "measured_at"]).index
    assert len(ds.rows) == len(rows) - 16 and kept.equals(good)
    # rows not ok have no time (oom, unsupported, skipped): none of them is refused
    assert (ds.rows.status != "ok").sum() == (rows.status != "ok").sum() > 0


def test_collect_leaves_out_rows_that_cannot_be_true_naming_the_file(tmp_path):
    path = tmp_path / "run.parquet"
    rows, why = _corrupted(path)
    messages, out = [], tmp_path / "m.parquet"
    merged = dataset.collect([path], out=out, log=messages.append)
    assert _line(path, why) in messages and len(merged) == len(rows) - 16
    assert read_metadata(out)["refused"] == [{"file": str(path), "rows": 16, "why": why}]
    # the merged file holds none of them: its own load drops nothing more
    later = []
    assert len(dataset.load(out, log=later.append).rows) == len(merged) and not later


@pytest.mark.parametrize("path", [RUN, PUBLISHED / "h200" / "measurements.parquet",
                                  PUBLISHED / "h200" / "workloads.parquet",
                                  PUBLISHED / "h200x2" / "measurements.parquet"],
                         ids=lambda p: str(Path(p).relative_to(ROOT)))
def test_real_measurements_are_never_refused(path):
    """The limits leave every measured row: an H200's L1 at 29 TB/s (6x its DRAM), its host
    clock without a sync at 9.4 PFLOP/s (the launch only, C5), transfer models with no time."""
    messages = []
    ds = dataset.load(path, log=messages.append)
    assert not messages and not ds.refused
    assert len(ds.rows) == pq.read_metadata(path).num_rows
