"""Real measurement files thinned the way a busy machine thins them, and every aggregate step run
on what is left (tests/system/steps/test_subsets.py).

A cut acts on one group of rows: one experiment on one system (source, host, device) in one
dtype. It drops rows or flags them contended or noisy: all of them, all but one, or a random
subset. The sources are the published sets and a CPU-only run of the default sweep
(tests/data/cpu_run.parquet: a 2-core AMD EPYC Zen 4 VM)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from experiments.analysis.claims import ANALYSIS_ERROR, NOT_MEASURABLE, VERDICTS
from experiments.steps import pipeline

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {"run": ROOT / "tests" / "data" / "cpu_run.parquet",
           "h200": ROOT / "results" / "published" / "h200" / "measurements.parquet",
           "h200x2": ROOT / "results" / "published" / "h200x2" / "measurements.parquet"}
GROUP = ["host", "device", "experiment", "dtype"]  # within one source
MODES = ("keep", "drop", "only_one", "contended_but_one", "noisy_but_one", "contended", "noisy",
         "drop_some", "contend_some", "noise_some")


@dataclass(frozen=True)
class Cut:
    """What happens to one group's rows. `index` picks the one row kept or left clean (Python's
    modulo: -1 is the group's last row, its largest size in sweep order); `seed` the subset."""

    mode: str = "keep"
    index: int = 0
    seed: int = 0

    def apply(self, g: pd.DataFrame) -> pd.DataFrame:
        if self.mode == "keep" or g.empty:
            return g
        one = np.zeros(len(g), dtype=bool)
        one[self.index % len(g)] = True
        some = np.random.default_rng(self.seed).random(len(g)) < 0.5
        g = g.copy()
        if self.mode == "drop":
            return g.iloc[:0]
        if self.mode == "only_one":
            return g[one]
        if self.mode == "drop_some":
            return g[~some]
        flag = {"contended_but_one": ("contended", ~one), "noisy_but_one": ("noisy", ~one),
                "contended": ("contended", ~one | one), "noisy": ("noisy", ~one | one),
                "contend_some": ("contended", some), "noise_some": ("noisy", some)}[self.mode]
        column, mask = flag
        g[column] = g[column].astype(object)
        g.loc[mask, column] = True
        return g


def groups(source: str) -> list[tuple]:
    frame = read(source)[0]
    return sorted(map(tuple, frame[GROUP].drop_duplicates().astype(str).to_numpy().tolist()))


_READ: dict[str, tuple[pd.DataFrame, pa.Schema]] = {}


def read(source: str) -> tuple[pd.DataFrame, pa.Schema]:
    if source not in _READ:
        table = pq.read_table(SOURCES[source])
        _READ[source] = (table.to_pandas(), table.schema)
    frame, schema = _READ[source]
    return frame, schema


def thinned(source: str, cuts: dict[tuple, Cut]) -> pa.Table:
    """The source's rows with each group's cut applied, in the file's own schema and metadata."""
    frame, schema = read(source)
    key = frame[GROUP].astype(str).apply(tuple, axis=1)
    parts = [cuts.get(k, Cut()).apply(g) for k, g in frame.groupby(key, sort=False)]
    out = pd.concat(parts) if parts else frame.iloc[:0]
    return pa.Table.from_pandas(out, schema=schema, preserve_index=False)


def write_sources(tmp: Path, cuts: dict[str, dict[tuple, Cut]]) -> tuple[list, list]:
    """Each chosen source thinned into tmp, laid out as collect reads it: (run files, published
    sets). A published set keeps its name (its rows' `source`)."""
    run, published = [], []
    for source, its_cuts in cuts.items():
        path = (tmp / "in" / "run.parquet" if source == "run"
                else tmp / "in" / "published" / source / "measurements.parquet")
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(thinned(source, its_cuts), path)
        (run if source == "run" else published).append(str(path.parent if source != "run"
                                                           else path))
    return run, published


ANALYSIS = ("roofline", "decode", "claims", "placements")


def run_steps(tmp: Path, cuts: dict[str, dict[tuple, Cut]], steps=pipeline.AFTER_COLLECT
              ) -> pipeline.Files:
    """collect, then `steps` in order, on the thinned sources; any exception propagates."""
    run, published = write_sources(tmp, cuts)
    results = tmp / "results"
    files = pipeline.Files.under(results)
    (results / "roofline").mkdir(parents=True, exist_ok=True)
    pipeline.collect(run, published, out=files.dataset)
    for step in steps:
        pipeline.run(step, files)
    return files


def check_outputs(files: pipeline.Files, steps) -> None:
    """What every run must leave, whatever points it lost: a ceiling row is a number or says
    "not fitted" and why; every verdict is one of four, and "not measurable here" gives its
    reason, never that a check broke on the rows; no figure broke; the report renders."""
    if "roofline" in steps:
        c = pd.read_parquet(files.ceilings)
        unfitted = c[c.value.isna()]
        assert (unfitted.method == "not fitted").all(), unfitted[["ceiling", "method"]]
        assert unfitted.note.fillna("").str.len().gt(0).all(), unfitted[["ceiling", "note"]]
        assert (c[c.value.notna()].method != "not fitted").all()
    if "claims" in steps:
        cl = pd.read_parquet(files.claims)
        assert cl.verdict.isin(VERDICTS).all(), cl.verdict.unique()
        broke = cl[cl.reason.fillna("").str.contains(ANALYSIS_ERROR, regex=False)]
        assert broke.empty, broke[["claim", "system", "reason"]].to_string()
        silent = cl[(cl.verdict == NOT_MEASURABLE) & cl.reason.fillna("").str.len().eq(0)]
        assert silent.empty, silent[["claim", "system"]]
    if "figures" in steps:
        status = json.loads((Path(files.figures) / "index.json").read_text())
        broke = {k: v for k, v in status.items() if v and v.startswith("could not draw")}
        assert not broke, broke
    if "report" in steps:
        html = Path(files.report).read_text()
        assert "</html>" in html and Path(files.summary).read_text().strip()
