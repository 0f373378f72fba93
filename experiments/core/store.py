"""Parquet in and out: atomic writes, and reads that name the file that is wrong."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from experiments.core.schema import FORMAT, LATER_COLUMNS, METADATA_KEY, SCHEMA, STATUSES


class DatasetError(ValueError):
    """A file in the dataset that is not a rooflab measurement file."""


class CannotWrite(OSError):
    """A file rooflab must write cannot be (a read-only or full place, a file where its folder
    should be): names the file itself, not the temp file beside it."""

    def __init__(self, path, cause: OSError):
        super().__init__(cause.errno, f"cannot write {path}: {cause.strerror or cause}")
        self.path = Path(path)

    def __str__(self) -> str:
        return self.strerror


# what a place that cannot take a file "is", by the error a write met
PLACE_PROBLEMS = {errno.EROFS: "is on a read-only file system",
                  errno.ENOSPC: "has no space left on its disk",
                  errno.EDQUOT: "is past its disk quota",
                  errno.EACCES: "is not writable by you"}


def unwritable(path, nbytes: int = 4096) -> str | None:
    """Why the folder `path` (or, where it does not exist yet, its nearest existing parent: no
    folder is made) cannot take a file of `nbytes`, as "is on a read-only file system"; None
    where it can. Tried with a real file, fsynced: a read-only mount or a full disk shows only
    so. The file is removed."""
    folder = Path(path)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        fd, probe = tempfile.mkstemp(prefix=".rooflab-probe-", dir=folder)
        try:
            os.write(fd, os.urandom(nbytes))
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        return PLACE_PROBLEMS.get(exc.errno, exc.strerror or str(exc))
    return None


# Set in a job forked by the fork server (experiments/sweep/): the pipe to its client, which puts
# the job's files in place once the job ended well. A job whose client or server died meanwhile
# (declared failed) never has its file accepted, however late it writes it.
COMMIT_FD = "ROOFLAB_COMMIT_FD"  # "pid:fd": that process's pipe


def _commit(tmp: str, path: Path) -> None:
    pid, _, fd = os.environ.get(COMMIT_FD, "").partition(":")
    if pid != str(os.getpid()):  # not that job (none, or a process it started): rename here
        os.replace(tmp, path)
        return
    os.write(int(fd), f"{os.path.abspath(tmp)}\0{path.absolute()}\n".encode())


@contextlib.contextmanager
def _temp_beside(path: Path, mode: str):
    """A temp file beside `path`, readable by others (mkstemp makes 0600), open in `mode`;
    yields (handle, its name); the body puts it in place, and it is removed if the body raises."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise CannotWrite(path, exc) from exc
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as handle:
            yield handle, tmp
    except OSError as exc:  # a full disk shows when the body writes
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, CannotWrite):
            raise
        raise CannotWrite(path, exc) from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(table: pa.Table, path: str | os.PathLike) -> Path:
    """Write to a temp file beside `path`, fsync, rename: a killed job leaves no partial file.
    Under the fork server the client renames it, once the job has ended well (_commit)."""
    path = Path(path)
    table = with_format(table)
    with _temp_beside(path, "wb") as (handle, tmp):
        pq.write_table(table, handle)
        handle.flush()
        os.fsync(handle.fileno())
        _commit(tmp, path)
    return path


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """A text file (a report, a CSV) written beside `path` and renamed over it."""
    path = Path(path)
    with _temp_beside(path, "w") as (handle, tmp):
        handle.write(text)
        handle.flush()
        os.replace(tmp, path)
    return path


def with_format(table: pa.Table) -> pa.Table:
    """A measurement table (one with rooflab metadata) stamped with its row schema's version and
    time unit (schema.FORMAT)."""
    meta = dict(table.schema.metadata or {})
    if METADATA_KEY not in meta:
        return table
    value = json.loads(meta[METADATA_KEY])
    if not isinstance(value, dict):
        return table
    meta[METADATA_KEY] = json.dumps(value | FORMAT, default=str)
    return table.replace_schema_metadata(meta)


def check_format(path, meta: dict) -> None:
    """Refuse a file written for another row schema or time unit (absent: an older file of ours)."""
    for key, ours in FORMAT.items():
        if key in meta and meta[key] != ours:
            raise DatasetError(f"{path}: its metadata says {key}={meta[key]!r}; rooflab reads "
                               f"{key}={ours!r} (a file of another rooflab version or tool: "
                               "convert it, or leave it out)")


def read_metadata(path: str | os.PathLike) -> dict:
    """The file's rooflab metadata: a JSON mapping ({} when the file has none)."""
    try:
        meta = pq.read_schema(path).metadata or {}
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise DatasetError(f"{path}: not a readable Parquet file ({exc})") from exc
    try:
        value = json.loads(meta.get(METADATA_KEY, b"{}"))
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise DatasetError(f"{path}: its rooflab metadata is not JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise DatasetError(f"{path}: its rooflab metadata is a {type(value).__name__}, "
                           "not a JSON mapping")
    return value


def read_measurements(path: str | os.PathLike) -> pa.Table:
    """Read one measurement file, checking that it is one of ours and has our columns."""
    check_format(path, read_metadata(path))
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise DatasetError(f"{path}: not a readable Parquet file ({exc})") from exc
    if "measured_on" not in table.column_names and "device" in table.column_names:
        # written before GPU pools existed: every job ran on its `device`
        table = table.append_column("measured_on", table.column("device"))
    for name in LATER_COLUMNS:
        if name not in table.column_names:  # written before conditions were recorded: unknown
            table = table.append_column(SCHEMA.field(name), pa.nulls(table.num_rows,
                                                                     SCHEMA.field(name).type))
    missing = [f.name for f in SCHEMA if f.name not in table.column_names]
    if missing:
        raise DatasetError(f"{path}: not a rooflab measurement file; missing columns {missing}")
    nulls = [f.name for f in SCHEMA if not f.nullable and table.column(f.name).null_count]
    if nulls:
        raise DatasetError(f"{path}: empty (null) values in {nulls}; every row must have them")
    try:
        table = table.select(SCHEMA.names).cast(SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
        raise DatasetError(f"{path}: columns of the wrong type ({exc})") from exc
    unknown = sorted(set(pc.unique(table.column("status")).to_pylist()) - set(STATUSES))
    if unknown:
        raise DatasetError(f"{path}: unknown status {unknown}; allowed: {list(STATUSES)}")
    return table

