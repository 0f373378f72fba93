"""collect: merge run files and published sets; a bad file fails naming it."""

import numpy as np
import pandas as pd
import pytest

import analysis_fixtures as fx
from experiments.analysis import dataset
from experiments.analysis.__main__ import main
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
    from experiments.analysis.report import _provenance
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
