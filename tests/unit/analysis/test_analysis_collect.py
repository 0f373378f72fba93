"""collect: merge run files and published sets; a bad file fails naming it."""

import numpy as np
import pandas as pd
import pytest

from tests import analysis_fixtures as fx
from experiments.analysis import dataset
from experiments.steps.command import main
from experiments.core.store import DatasetError


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    run = fx.write_files(tmp_path / "run", {"bandwidth": fx.bandwidth_rows(fx.CPU, rng,
                                                                           ("float32",))}, fx.CPU)
    gpu = fx.write_files(tmp_path / "gpu", {"matmul": fx.matmul_rows(fx.GPU, rng, (1024, 2048))},
                         fx.GPU)
    published = tmp_path / "results" / "published" / "h200" / "measurements.parquet"
    dataset.collect(gpu, out=published)
    return run, published


def test_published_rows_stay_distinguishable(files, tmp_path):
    run, published = files
    out = tmp_path / "merged.parquet"
    messages = []
    rows = dataset.collect(run, [published, tmp_path / "absent.parquet"], out=out,
                           log=messages.append)
    assert set(rows.source) == {"run", "published:h200"}
    assert any("absent.parquet not found; skipped" in m for m in messages)
    ds = dataset.load(out)
    systems = ds.systems()
    assert list(systems.source) == ["run", "published:h200"]  # this run first
    assert systems.system.iloc[1] == "NVIDIA H200 @ h200-ref [published:h200]"
    # the published file's own metadata (device facts) survives the second merge
    assert ds.facts(systems.system.iloc[1])["name"] == "NVIDIA H200"
    # the merged file is still a valid dataset for any Parquet reader
    assert len(pd.read_parquet(out)) == len(rows)


@pytest.mark.parametrize("kind", ["garbage", "foreign", "empty"])
def test_bad_file_fails_naming_it(files, tmp_path, kind, capsys):
    run, _ = files
    bad = tmp_path / f"{kind}.parquet"
    if kind == "garbage":
        bad.write_bytes(b"PAR1 this is not parquet at all")
    elif kind == "foreign":
        pd.DataFrame({"x": [1, 2], "y": ["a", "b"]}).to_parquet(bad)
    else:
        bad.write_bytes(b"")
    with pytest.raises(DatasetError, match=str(bad)):
        dataset.collect(run + [bad], out=tmp_path / "m.parquet")
    assert not (tmp_path / "m.parquet").exists()
    # the command line says the same, with exit status 2
    assert main(["collect", str(tmp_path / "m.parquet"), *map(str, run), str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err


def test_nothing_to_collect_is_an_error(tmp_path):
    with pytest.raises(DatasetError, match="no measurement files"):
        dataset.collect([], [tmp_path / "absent.parquet"], log=lambda m: None)


def test_a_gpu_pool_is_one_system_that_says_where_its_jobs_ran(tmp_path):
    from experiments.report.provenance import provenance as _provenance
    from experiments.core.schema import to_table
    from experiments.core.store import write_atomic

    rng = np.random.default_rng(2)
    pool = fx.GPU | {"device": "cuda:0+1"}
    paths = []
    for experiment, rows, gpu in [("bandwidth", fx.bandwidth_rows(pool, rng, ("float32",)), 0),
                                  ("matmul", fx.matmul_rows(pool, rng, (1024,)), 1)]:
        path = tmp_path / f"{experiment}.parquet"
        meta = fx.metadata(pool, experiment) | {"measured_on": f"cuda:{gpu}"}
        write_atomic(to_table([r | {"measured_on": f"cuda:{gpu}"} for r in rows], meta), path)
        paths.append(path)
    rows = dataset.collect(paths, out=tmp_path / "m.parquet")
    assert set(rows.measured_on) == {"cuda:0", "cuda:1"}
    ds = dataset.load(tmp_path / "m.parquet")
    assert list(ds.systems().system) == ["NVIDIA H200 @ h200-ref"]  # one system, not two
    assert _provenance(ds)[0]["ran_on"] == "cuda:0 (1 files), cuda:1 (1 files)"


def test_files_from_before_pools_read_with_measured_on_their_device(files, tmp_path):
    import pyarrow.parquet as pq

    run, _ = files
    table = pq.read_table(run[0])
    old = tmp_path / "old.parquet"
    pq.write_table(table.drop_columns(["measured_on"]), old)
    rows = dataset.collect([old])
    assert (rows.measured_on == rows.device).all() and len(rows) == table.num_rows


# -- duplicates, files left out, malformed inputs ---------------------------------------------

def _job_file(root, host="lab", experiment="bandwidth", dtype="float32", run_id="r1", **row):
    """One job's file at root/<host>/cpu/<experiment>/<dtype>.parquet, as a run writes it."""
    from experiments.core.schema import to_table
    from experiments.core.store import write_atomic

    rows = [{"experiment": experiment, "op": "copy", "host": host, "device": "cpu",
             "device_kind": "cpu", "dtype": dtype, "status": "ok", "time_s": t, "n": n,
             "run_id": run_id} | row for n, t in ((1024, 1e-6), (4096, 3e-6))]
    path = root / host / "cpu" / experiment / f"{dtype}.parquet"
    write_atomic(to_table(rows, {"run_id": run_id, "host": host, "device": "cpu"}), path)
    return path


def _meta(path):
    from experiments.core.store import read_metadata

    return read_metadata(path)


def test_a_host_folder_copied_twice_is_collected_once(tmp_path):
    import shutil

    root = tmp_path / "measurements"
    first = _job_file(root, host="lab")
    shutil.copytree(root / "lab", root / "lab-copy")  # the same machine's folder under two names
    second = root / "lab-copy" / "cpu" / "bandwidth" / "float32.parquet"
    other = _job_file(root, host="lab", dtype="float16", run_id="r2")
    messages, out = [], tmp_path / "m.parquet"
    rows = dataset.collect([first, other, second], out=out, log=messages.append)
    assert len(rows) == 4 and sorted(rows.run_id) == ["r1", "r1", "r2", "r2"]
    assert any(str(first) in m and str(second) in m and "collected once" in m for m in messages)
    assert _meta(out)["duplicates"] == [{"kept": str(first), "dropped": str(second), "rows": 2}]
    assert str(second) not in _meta(out)["sources"]  # nothing of it was kept
    assert len(dataset.load(out).rows) == 4


def test_a_published_set_copied_into_measurements_is_counted_once(tmp_path):
    import shutil

    root = tmp_path / "measurements"
    job = _job_file(root, host="lab")
    published = tmp_path / "published" / "lab" / "measurements.parquet"
    dataset.collect([job], out=published)
    # and its rows again, as a job file of a host folder copied in as well
    copy = root / "lab2" / "cpu" / "bandwidth" / "float32.parquet"
    copy.parent.mkdir(parents=True)
    shutil.copy(job, copy)
    out = tmp_path / "m.parquet"
    rows = dataset.collect([job, copy], [published], out=out, log=lambda m: None)
    assert len(rows) == 2 and set(rows.source) == {"run"}
    assert _meta(out)["duplicates"] == [
        {"kept": str(job), "dropped": str(copy), "rows": 2},
        {"kept": str(job), "dropped": str(published), "rows": 2}]


def test_same_run_id_with_other_content_is_not_a_duplicate(tmp_path):
    a = _job_file(tmp_path / "a", run_id="r1")
    b = _job_file(tmp_path / "b", run_id="r1", time_s=5e-6)  # other times: other rows
    out = tmp_path / "m.parquet"
    assert len(dataset.collect([a, b], out=out, log=lambda m: None)) == 4
    assert _meta(out)["duplicates"] == []


def test_every_parquet_file_under_measurements_is_collected_or_listed_with_why(tmp_path, capsys):
    root = tmp_path / "measurements"
    sweep = _job_file(root, host="lab")
    stray = _job_file(root, host="lab", experiment="matmul")  # in this host's folder, no job's
    shallow = root / "lab" / "old.parquet"  # at an unexpected depth
    shallow.write_bytes(sweep.read_bytes())
    deep = root / "lab" / "cpu" / "bandwidth" / "v1" / "float32.parquet"
    deep.parent.mkdir()
    deep.write_bytes(b"not even Parquet")  # left out, so never read
    out = tmp_path / "m.parquet"
    assert main(["collect", str(out), str(sweep), "--scan", str(root)]) == 0
    ignored = _meta(out)["ignored"]
    assert set(ignored) == {str(stray), str(shallow), str(deep)}
    assert "no job of the sweep" in ignored[str(stray)]
    assert "<host>/<device>/<experiment>/<dtype>.parquet" in ignored[str(shallow)]
    assert "<host>/<device>/<experiment>/<dtype>.parquet" in ignored[str(deep)]
    err = capsys.readouterr().err
    assert all(f"{p} ignored: " in err for p in ignored)
    assert len(pd.read_parquet(out)) == 2


def _rewrite(path, *, metadata=None, column=None, values=None):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    if column:
        i = table.schema.get_field_index(column)
        table = table.set_column(i, pa.field(column, pa.string()), pa.array(values, pa.string()))
    if metadata is not None:
        table = table.replace_schema_metadata({b"rooflab": metadata})
    pq.write_table(table, path)


@pytest.mark.parametrize("damage, message", [
    (dict(column="host", values=[None, "lab"]), r"empty \(null\) values in \['host'\]"),
    (dict(column="status", values=["ok", "fine"]), r"unknown status \['fine'\]; allowed: \['ok'"),
    (dict(metadata=b"[1, 2]"), "its rooflab metadata is a list, not a JSON mapping"),
    (dict(metadata=b"{not json"), "its rooflab metadata is not JSON"),
    (dict(metadata=b'{"sources": {"x": 3}}'), "rooflab metadata of \\['x'\\] is not a JSON mapping"),
])
def test_malformed_file_fails_naming_it(tmp_path, damage, message, capsys):
    good = _job_file(tmp_path / "m", host="a")
    bad = _job_file(tmp_path / "m", host="b")
    _rewrite(bad, **damage)
    with pytest.raises(DatasetError, match=f"{bad}: {message}"):
        dataset.collect([good, bad], out=tmp_path / "out.parquet")
    assert not (tmp_path / "out.parquet").exists()
    assert main(["collect", str(tmp_path / "out.parquet"), str(good), str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err


def test_collect_gives_each_row_the_claims_that_read_its_experiment(files, tmp_path):
    from experiments.analysis.claims import by_experiment
    run, published = files
    out = tmp_path / "merged.parquet"
    assert main(["collect", str(out), *map(str, run), "--published", str(published)]) == 0
    rows = pd.read_parquet(out)
    reads = by_experiment()
    assert set(rows.experiment) == {"bandwidth", "matmul"}
    for exp, claims in rows.groupby("experiment").claims:
        assert all(list(c) == list(reads[exp]) for c in claims), exp
    assert "C11" in reads["intensity"] and "C8" in reads["bandwidth"]  # C11 reads intensity rows
