"""One dataset from many measurement files: merge this run's files with published sets, label
where every row came from, and read the merged file back with helpers the other modules share.

The merged file is the row schema plus one column, `source`: "run" for this run's files,
"published:<name>" for a published set (derived from its path). Measurement files themselves keep
the one schema; the merged file's metadata keeps every input file's metadata, keyed by path,
the duplicate rows collected once (`duplicates`) and the files left out with why (`ignored`).
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from experiments.analysis import rowcheck
from experiments.core import layout
from experiments.core.power import drop_impossible_power
from experiments.core.paths import config_dir
from experiments.core.schema import METADATA_KEY, SCHEMA, to_table
from experiments.core.store import DatasetError, read_measurements, read_metadata, write_atomic

RUN = "run"
DATASET_SCHEMA = SCHEMA.append(pa.field("source", pa.string()))
SYSTEM_KEY = ["source", "host", "device"]


def source_label(path: str | Path) -> str:
    """'published:h200' for results/published/h200/measurements.parquet: the path below
    `published/`, without the suffix and a generic 'measurements' file name."""
    parts = list(Path(path).with_suffix("").parts)
    rest = parts[parts.index("published") + 1:] if "published" in parts else parts[-2:]
    rest = [p for p in rest if p != "measurements"] or [Path(path).stem]
    return "published:" + "/".join(rest)


def _files(path: Path) -> list[Path]:
    return sorted(path.rglob("*.parquet")) if path.is_dir() else [path]


def _read(path: Path, source: str) -> tuple[pa.Table, dict]:
    table = read_measurements(path)  # raises DatasetError naming the file
    meta = read_metadata(path)  # the same
    # A published set is usually itself a merged file: keep its inner files' metadata.
    inner = meta.get("sources") if isinstance(meta.get("sources"), dict) else {str(path): meta}
    bad = [k for k, v in inner.items() if not isinstance(v, dict)]
    if bad:
        raise DatasetError(f"{path}: rooflab metadata of {bad} is not a JSON mapping")
    metas = {(k if k == str(path) else f"{path}::{k}"): dict(v) | {"source": source}
             for k, v in inner.items()}
    column = pa.array([source] * table.num_rows, pa.string())
    return table.append_column("source", column), metas


def ignored_files(scan, inputs: list[Path]) -> dict[str, str]:
    """Every Parquet file under `scan` that is not an input, with the reason it is left out."""
    if scan is None or not Path(scan).is_dir():
        return {}
    taken = {p.resolve() for p in inputs}
    ignored = {}
    for path in sorted(Path(scan).rglob("*.parquet")):
        if path.resolve() in taken:
            continue
        depth = len(path.relative_to(scan).parts)
        ignored[str(path)] = (
            f"not a job's file: measurement files lie at {layout.MEASUREMENT_SHOWN}"
            if depth != len(layout.JOB_PARTS) else
            "no job of the sweep (config/config.yaml) writes it, so it is not among the files "
            "to collect"
        )
    return ignored


def _leave_out(table: pa.Table, path, seen: dict, sheets: list, log):
    """The table less the rows no step reads (analysis/rowcheck.py), each kind said in a line
    naming `path`; also what the metadata records of them: `duplicates` and `refused` entries."""
    table, why = rowcheck.refuse(table, sheets)
    if why:
        log(rowcheck.refused_line(path, why))
    table, copies = rowcheck.drop_copies(table, path, seen)
    for kept, rows in copies.items():
        log(rowcheck.copies_line(path, kept, rows))
    return (table, [{"kept": k, "dropped": str(path), "rows": n} for k, n in copies.items()],
            [{"file": str(path), "rows": sum(why.values()), "why": why}] if why else [])


def say(msg: str) -> None:
    print(msg, file=sys.stderr)


def collect(run_files, published=(), out=None, log=say, scan=None,
            claims_of: dict | None = None, datasheets=None):
    """Merge this run's measurement files and the published sets that exist into one table.

    A missing published set is skipped with a message; a file that is not a rooflab measurement
    file fails with DatasetError naming it. Rows already read (same run_id, same content: a host
    folder copied twice, a published set copied into measurements/, a row written twice) are
    collected once, and rows that cannot be true are left out (analysis/rowcheck.py; rate limits
    from `datasheets`, default config/datasheets.yaml), each with a message naming the file. With
    `scan` (the measurements folder), every Parquet file under it that is not collected is named
    with the reason.

    The merged file's rooflab metadata: `sources` (each input file's metadata, keyed by path),
    `duplicates` ([{kept, dropped, rows}]), `refused` ([{file, rows, why: {reason: rows}}]) and
    `ignored` ({path: reason}). With `claims_of` (experiment -> claim ids), every row's `claims`
    is its experiment's."""
    inputs = [(Path(p), RUN) for p in run_files]
    for p in published:
        p = Path(p)
        if not p.exists():
            log(f"rooflab: published dataset {p} not found; skipped")
            continue
        files = _files(p)
        if not files:
            log(f"rooflab: published dataset {p} holds no Parquet files; skipped")
        inputs += [(f, source_label(p)) for f in files]
    ignored = ignored_files(scan, [p for p, _ in inputs])
    for path, reason in ignored.items():
        log(f"rooflab: {path} ignored: {reason}")

    tables, metas, duplicates, refused = [], {}, [], []
    seen: dict[str, str] = {}  # row key -> the file it was first read from
    read: set[Path] = set()
    sheets = rowcheck.reference_sheets(datasheets)
    for path, source in inputs:
        if path.resolve() in read:  # one file named twice (a published set inside measurements/)
            log(f"rooflab: {path} named twice; read once")
            continue
        read.add(path.resolve())
        table, meta = _read(path, source)
        table, copies, why = _leave_out(table, path, seen, sheets, log)
        duplicates += copies
        refused += why
        if copies and not table.num_rows:
            continue  # nothing new: neither its rows nor its metadata
        tables.append(table)
        metas.update(meta)
    if not tables:
        raise DatasetError("no measurement files to collect (no run files, no published sets)")
    merged = pa.concat_tables(tables)
    if claims_of is not None:
        i = merged.schema.get_field_index("claims")
        merged = merged.set_column(i, merged.schema.field(i), pa.array(
            [list(claims_of.get(e, ())) for e in merged.column("experiment").to_pylist()],
            merged.schema.field(i).type))
    merged = merged.replace_schema_metadata({METADATA_KEY: json.dumps(
        {"sources": metas, "duplicates": duplicates, "refused": refused, "ignored": ignored},
        default=str)})
    if out is not None:
        write_atomic(merged, out)
        log(f"rooflab: {merged.num_rows} rows from {len(inputs)} files -> {out}")
    return merged.to_pandas()


@dataclass
class Dataset:
    """The merged rows, plus the metadata of every file they came from."""

    rows: pd.DataFrame
    files: dict  # path -> that file's metadata (with its "source")
    duplicates: list = field(default_factory=list)  # [{kept, dropped, rows}] collect dropped
    ignored: dict = field(default_factory=dict)  # {path: why} files collect left out
    refused: list = field(default_factory=list)  # [{file, rows, why}] rows that cannot be true
    _systems: tuple = field(default=(None, None), repr=False, compare=False)  # (rows, table)

    def systems(self) -> pd.DataFrame:
        """One row per (source, host, device) with its label, run first (kept while `rows` is
        the same frame: every fit and claim asks for it, a step hundreds of times)."""
        if self._systems[0] is not self.rows:
            cols = SYSTEM_KEY + ["device_kind", "device_name", "system"]
            s = self.rows.drop_duplicates(SYSTEM_KEY)[cols].copy()
            s["order"] = (s.source != RUN).astype(int)
            self._systems = (self.rows, s.sort_values(["order", "system"]).drop(
                columns="order").reset_index(drop=True))
        return self._systems[1].copy()

    def own_first(self, systems: list[str]) -> list[str]:
        """This run's among `systems` where it has any there, else `systems` (published)."""
        table = self.systems()
        own = set(table.system[table.source == RUN])
        return [s for s in systems if s in own] or list(systems)

    def file_metas(self, system: str) -> list[dict]:
        """Metadata of the files that hold `system`'s rows."""
        row = self.systems().set_index("system").loc[system]
        return [m for m in self.files.values()
                if m.get("source") == row.source and m.get("host") == row.host
                and m.get("device") == row.device]

    def power_limits(self) -> dict[str, float]:
        """system -> the enforced power limit (W) its files recorded, else its datasheet's."""
        from experiments.analysis import datasheets  # here: the file is read only for GPUs

        out, sheets = {}, None
        for _, s in self.systems().iterrows():
            if s.device_kind != "cuda":
                continue
            rec = [(m.get("conditions") or {}).get("power_limit_w") for m in
                   self.file_metas(s.system)]
            rec = [v for v in rec if v]
            if not rec:
                sheets = sheets if sheets is not None else datasheets.load(
                    config_dir() / "datasheets.yaml")
                sheet = datasheets.find(sheets, s.device_name)
                rec = [sheet.power_W] if sheet is not None and sheet.power_W else []
            if rec:
                out[s.system] = max(rec)
        return out

    def drop_impossible_power(self) -> "Dataset":
        """Power and energy of rows above their system's power limit (+5 %) set to NaN, with
        the reason in `energy_note` (core/conditions.drop_impossible_power)."""
        drop_impossible_power(self.rows, self.power_limits())
        return self

    def facts(self, system: str) -> dict:
        """Device facts of a system from its files' metadata ({} when none recorded them)."""
        for meta in self.file_metas(system):
            if meta.get("device_facts"):
                return meta["device_facts"]
        return {}


def published_folder(ds: "Dataset", source: str) -> Path | None:
    """The folder of a published set's file (results/published/h200 for "published:h200" and
    "published:h200/workloads"), where it exists; None for this run's rows."""
    for key, meta in ds.files.items():
        if source != RUN and meta.get("source") == source:
            folder = Path(key.split("::")[0]).parent
            return folder if folder.is_dir() else None
    return None


def add_labels(rows: pd.DataFrame) -> pd.DataFrame:
    """Add `system`: 'device name @ host', with the source for published sets."""
    rows = rows.copy()
    if "source" not in rows:
        rows["source"] = RUN
    rows["source"] = rows["source"].fillna(RUN)
    first = rows.groupby(SYSTEM_KEY, sort=False).device_name.transform("first")
    name = first.fillna(rows.device).astype(str)
    label = name + " @ " + rows.host.astype(str)
    # several devices of one name on one host (a 2-GPU node): tell them apart by device
    same = rows.groupby(["source", "host", name], sort=False).device.transform("nunique") > 1
    label = label.where(~same, name + " (" + rows.device.astype(str) + ") @ " + rows.host.astype(str))
    published = rows.source != RUN
    rows["system"] = label.where(~published, label + " [" + rows.source + "]")
    return rows


def load(path, log=say, datasheets=None) -> Dataset:
    """Read a merged dataset written by `collect` (or a single measurement file), less the rows
    no step reads, left out and said as `collect` does (rate limits from `datasheets`)."""
    path = Path(path)
    table = read_measurements(path)  # the schema columns, checked
    if "source" in pq.read_schema(path).names:
        source = pq.read_table(path, columns=["source"]).column("source").cast(pa.string())
        table = table.append_column("source", source)
    table, copies, why = _leave_out(table, path, {}, rowcheck.reference_sheets(datasheets), log)
    rows = table.to_pandas()
    meta = read_metadata(path)
    files = meta.get("sources") if isinstance(meta.get("sources"), dict) else {
        str(path): meta | {"source": RUN}}
    files = {k: dict(v, source=v.get("source", RUN)) for k, v in files.items()}
    return Dataset(add_labels(rows), files, list(meta.get("duplicates") or []) + copies,
                   dict(meta.get("ignored") or {}),
                   list(meta.get("refused") or []) + why).drop_impossible_power()


def from_rows(rows: list[dict], files: dict | None = None, source: str = RUN) -> Dataset:
    """A Dataset from row dicts in memory (tests, notebooks): derived through the one schema
    (intensity, rates) exactly as a measurement file would be."""
    frame = to_table(rows, {}).to_pandas()
    frame["source"] = source
    return Dataset(add_labels(frame), files or {}).drop_impossible_power()


@contextmanager
def reading(what: str):
    """Name the rows a step was reading when it raised: `what` joins the exception's
    `rooflab_rows` (innermost first), which the step's error line quotes."""
    try:
        yield
    except Exception as exc:
        exc.rooflab_rows = [*getattr(exc, "rooflab_rows", []), what]
        raise


def rows_read(exc: BaseException) -> str:
    """'the matmul rows (7 ok) of AMD EPYC @ vm': what `reading` named, innermost first."""
    return " of ".join(getattr(exc, "rooflab_rows", []))


def ok(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[rows.status == "ok"]


def params(rows: pd.DataFrame) -> pd.DataFrame:
    """The `params` of each row (JSON, or a dict) as columns (missing keys are NaN), indexed like
    rows; no columns where the rows have no params."""
    if "params" not in rows:
        return pd.DataFrame(index=rows.index)
    parsed = [p if isinstance(p, dict) else json.loads(p) if isinstance(p, str) and p else {}
              for p in rows["params"]]
    return pd.DataFrame(parsed, index=rows.index)


def param(rows: pd.DataFrame, key: str) -> pd.Series:
    frame = params(rows)
    return frame[key] if key in frame else pd.Series(float("nan"), index=rows.index)
