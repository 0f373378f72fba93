"""Where rooflab writes and what users hand it: a read-only or full place, bytes that are not
UTF-8, a file of the user's that shadows the standard library. Each is one line naming the
problem and what moves it, before anything is measured where it can be, and no row is lost.

The read-only and full places are small tmpfs mounts; where the machine does not allow mounting
(not root, no CAP_SYS_ADMIN), those tests skip saying so."""

from __future__ import annotations

import contextlib
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from experiments.cli import rooflab as cli
from experiments.core.store import CannotWrite, unwritable, write_text_atomic
from tests.workflow_copy import ROOT

BAD_BYTES = textwrap.dedent('''
    import torch
    def make_badbytes(batch, dtype, device, generator):
        name = b"weights-\\xff.bin".decode("utf-8", "surrogateescape")  # as os.listdir gives it
        raise FileNotFoundError(f"no such file: {name}")
''')
PUBLISHED = ROOT / "results" / "published" / "h200" / "measurements.parquet"


@contextlib.contextmanager
def mounted(folder: Path, options: str):
    """A tmpfs at `folder` for the block (skipped, saying why, where mounting is not allowed)."""
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
                          capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or 'mount failed'})")
    try:
        yield folder
    finally:
        done = subprocess.run(["umount", str(folder)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


@pytest.fixture
def read_only(tmp_path):
    with mounted(tmp_path / "ro", "ro,size=1m") as folder:
        yield folder


@pytest.fixture
def full(tmp_path):
    with mounted(tmp_path / "full", "size=64k") as folder:
        with open(folder / "filler", "wb", buffering=0) as f:  # every block taken
            try:
                while f.write(b"\0" * 4096):
                    pass
            except OSError:
                pass
        yield folder


def test_a_read_only_or_full_place_is_named_before_anything_is_written(read_only, full):
    assert unwritable(read_only) == "is on a read-only file system"
    assert unwritable(full) == "has no space left on its disk"
    assert unwritable(full / "not" / "yet") == "has no space left on its disk"  # its parent's
    assert sorted(p.name for p in full.iterdir()) == ["filler"]  # no folder made, no probe left
    with pytest.raises(CannotWrite, match=f"cannot write {full / 'x.csv'}: No space left"):
        write_text_atomic(full / "x.csv", "a,b\n" * 10_000)
    assert sorted(p.name for p in full.iterdir()) == ["filler"]  # no temp file left behind


def test_undecodable_bytes_in_a_message_are_kept_escaped(run_experiment, tmp_path):
    path = tmp_path / "factories.py"
    path.write_text(BAD_BYTES)
    rows = run_experiment("workload", "float32", [f"experiment.target='{path}:make_badbytes'",
                                                  "experiment.batches=[1]"])
    assert list(rows.status) == ["error"]
    assert "no such file: weights-\\udcff.bin" in rows.message.iloc[0]


def test_compare_into_a_read_only_folder_is_one_line(read_only, capsys):
    out = read_only / "x.csv"
    assert cli.main(["compare", str(PUBLISHED), str(PUBLISHED), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # stopped before comparing: nothing printed, nothing lost
    line, = captured.err.strip().splitlines()
    assert line == (f"rooflab compare: --out {out}: its folder {read_only} is on a read-only "
                    "file system; give --out a writable path")


def test_report_into_a_read_only_results_folder_is_one_line(tmp_path, capsys):
    with mounted(tmp_path / "res", "size=4m") as results:
        (results / "measurements.parquet").write_bytes(PUBLISHED.read_bytes())
        subprocess.run(["mount", "-o", "remount,ro", str(results)], check=True)
        assert cli.main(["report", "--results", str(results)]) == 2
        line, = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"rooflab report: the results folder {results} is on a read-only")
        assert "writable folder" in line


def test_run_from_a_read_only_checkout_is_one_line(read_only, tmp_path, capsys):
    here = os.getcwd()
    os.chdir(read_only)  # not monkeypatch's: an autouse fixture holds it past the unmount
    try:
        for extra in ([], ["--results", str(tmp_path / "writable")]):
            assert cli.main(["run", "--quick", "-n", *extra]) == 2
            line, = capsys.readouterr().err.strip().splitlines()
            assert line.startswith(f"rooflab run: this directory ({read_only}) is on a read-only")
            assert ".snakemake/" in line and "writable directory" in line
    finally:
        os.chdir(here)


def test_run_with_a_full_tmpdir_is_one_line(full, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TMPDIR", str(full))
    assert cli.main(["run", "--quick", "-n"]) == 2
    line, = capsys.readouterr().err.strip().splitlines()
    assert line == (f"rooflab run: the temporary folder {full} (TMPDIR) has no space left on its "
                    "disk; set TMPDIR to a folder with room")


def test_place_into_a_read_only_folder_is_one_line_before_measuring(read_only, capsys):
    from experiments.cli.place import main
    out = read_only / "r.parquet"
    assert main(["experiments.models:make_mlp", "--device", "cpu", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing measured
    line, = captured.err.strip().splitlines()
    assert line == (f"python -m experiments place: --out {out}: its folder {read_only} is on a "
                    "read-only file system; give --out a writable path")


def test_the_users_files_named_as_standard_modules_are_found(tmp_path):
    (tmp_path / "random.py").write_text("")
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "__init__.py").write_text("")
    (tmp_path / "my_model.py").write_text("")
    assert cli.shadowing(tmp_path) == ["./json", "./random.py"]
