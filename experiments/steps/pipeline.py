"""The aggregate steps, each defined once: what it reads, what it writes, what it does.

    collect   measurement files + published sets -> results/measurements.parquet (the dataset)
    roofline  dataset -> roofline/ceilings.parquet
    decode    dataset, ceilings -> roofline/knees.parquet, roofline/decode_model.parquet
    claims    dataset, ceilings, knees, datasheets -> claims.parquet
    placements  dataset, ceilings, datasheets -> placements.parquet (every workload call and op,
              predicted), workload_knees.parquet (each workload's batch knee, measured and
              predicted), datasheet_predictions.parquet (each call on the datasheet devices)
    interactive  dataset, ceilings, placements, workload knees, datasheet predictions ->
              roofline/interactive.json (the report's Bokeh roofline, built beside the figures)
    figures   dataset, ceilings, knees, decode model, datasheets -> figures/ (SVG, index.json)
    report    dataset, ceilings, knees, claims, placements, workload knees, datasheet predictions,
              datasheets, figures, interactive -> report.html (it renders: it computes nothing a
              step before it writes), summary.txt (what `rooflab run` prints at the end)

Everything that runs them reads this table: `python -m experiments.steps STEP` (its options,
experiments/steps/command.py), the workflow's aggregate rules (their commands,
workflow/rules/aggregate.smk), `rooflab report` (every step after collect) and the tests. What
each step computes is experiments/analysis/compute.py's (`rooflab compare` chains it in memory);
this room sits above analysis and report, the one place that joins them. Nothing heavy is
imported at the top: the Snakefile reads this module while parsing.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Callable

from experiments.core.paths import config_dir

DATASHEETS = str(config_dir() / "datasheets.yaml")
COMMAND = "python -m experiments.steps"


@dataclass(frozen=True)
class Files:
    """Where each step's inputs and outputs are. `under(results)` is the workflow's layout."""

    dataset: str | None = None
    ceilings: str | None = None
    knees: str | None = None
    decode_model: str | None = None
    claims: str | None = None
    placements: str | None = None
    workload_knees: str | None = None
    datasheet_predictions: str | None = None
    figures: str | None = None  # a folder
    interactive: str | None = None  # the report's interactive roofline, as it embeds it
    report: str | None = None
    summary: str | None = None  # the one-screen summary `rooflab run` prints
    logs: str | None = None  # a folder: each step's log, its error line and traceback
    datasheets: str = DATASHEETS

    @classmethod
    def under(cls, results, datasheets: str | None = None) -> "Files":
        from experiments.core.layout import AGGREGATE, under
        return cls(**{key: under(results, path) for key, path in AGGREGATE.items()},
                   datasheets=datasheets or DATASHEETS)

    def but(self, **changes) -> "Files":
        return replace(self, **changes)


FILE_KEYS = tuple(f.name for f in fields(Files))
FAILED = " failed"  # a step's error line: "rooflab: STEP failed on FILE[, reading ROWS]: ..."


def failures(logs, since: float = 0.0) -> list[str]:
    """The error line of every step log in `logs` written after `since` (a time stamp), with
    the log's path: what a failed run says last."""
    out = []
    for log in sorted(Path(logs).glob("*.log")) if logs and Path(logs).is_dir() else []:
        if log.stat().st_mtime >= since:
            out += failure_lines(log.read_text(errors="replace"), log)
    return out


def failure_lines(text: str, log) -> list[str]:
    """A step's error lines in its log's `text`, each with the log's path."""
    return [f"{line} (traceback: {log})" for line in text.splitlines()
            if line.startswith("rooflab: ") and FAILED in line]


# ---- the steps on files ----------------------------------------------------------------------

def _write(frame, path):
    import pyarrow as pa

    from experiments.core.store import write_atomic
    write_atomic(pa.Table.from_pandas(frame, preserve_index=False), path)


def _frame(path):
    import pandas as pd
    return pd.read_parquet(path)


def _dataset(files: Files):
    """The dataset less the rows no step reads (copies, rows that cannot be true), each said."""
    from experiments.analysis import dataset
    return dataset.load(files.dataset, datasheets=files.datasheets)


def _sheets(files: Files):
    from experiments.analysis import datasheets
    return datasheets.load(files.datasheets)


def collect(run_files, published=(), *, out, scan=None) -> None:
    """Merge measurement files and published sets into the dataset (the first step); each row's
    `claims`: those that read its experiment."""
    from experiments.analysis import claims, dataset
    dataset.collect(run_files, published, out=out, scan=scan, claims_of=claims.by_experiment())


def _roofline(f: Files) -> str:
    from experiments.analysis.compute import fit_ceilings
    table = fit_ceilings(_dataset(f))
    _write(table, f.ceilings)
    fitted = table[table.value.notna()]
    return (f"{len(fitted)} ceilings fitted, {len(table) - len(fitted)} not (see their notes) "
            f"-> {f.ceilings}")


def _decode(f: Files) -> str:
    from experiments.analysis.compute import decode_knees
    table, per_row = decode_knees(_dataset(f), _frame(f.ceilings))
    _write(table, f.knees)
    _write(per_row, f.decode_model)
    return f"{len(table)} decode curves -> {f.knees}"


def _claims(f: Files) -> str:
    from experiments.analysis.compute import judge_claims
    table = judge_claims(_dataset(f), _frame(f.ceilings), _sheets(f), _frame(f.knees))
    if f.claims:
        _write(table, f.claims)
    for _, r in table.iterrows():  # without a file to write, the verdicts are the output
        text = "; ".join(t for t in (r.measurement, r.reason) if t)
        print(f"{r.claim:<4} {r.verdict:<20} {r.system}: {text}",
              file=sys.stderr if f.claims else sys.stdout)
    return ""


def _placements(f: Files) -> str:
    """placements.parquet; with their paths, the workloads' batch knees (a bootstrap per knee)
    and every call predicted on the datasheet devices (the report reads all three)."""
    from experiments.analysis import compute, placements
    ds, ceilings = _dataset(f), _frame(f.ceilings)
    table = placements.placement_table(ds, ceilings)
    _write(table, f.placements)
    stats = placements.error_stats(table)
    lines = [f"{len(table)} placements -> {f.placements}; |error| median/p90: " + ", ".join(
        f"{k} {v['median']:.0%}/{v['p90']:.0%} (n={v['n']})" for k, v in stats.items() if v["n"])]
    if f.workload_knees:
        knees = compute.workload_knees(ds, ceilings)
        _write(knees, f.workload_knees)
        lines.append(f"{len(knees)} workload batch knees -> {f.workload_knees}")
    if f.datasheet_predictions:
        calls, _ = placements.read_placements(table)
        predicted = compute.on_datasheets(calls, _sheets(f))
        _write(predicted, f.datasheet_predictions)
        lines.append(f"{len(predicted)} calls on datasheet devices -> {f.datasheet_predictions}")
    return "\n".join(lines)


def _figures(f: Files) -> str:
    import json

    from experiments.report import figures  # matplotlib: only this step pays for it
    status = figures.draw_all(figures.Inputs(_dataset(f), _frame(f.ceilings), _sheets(f),
                                             _frame(f.decode_model), _frame(f.knees)), f.figures)
    from experiments.core.layout import FIGURE_INDEX
    (Path(f.figures) / FIGURE_INDEX).write_text(json.dumps(status, indent=1))
    return "\n".join(f"figure {name}: " + (f"placeholder ({why})" if why else "drawn")
                     for name, why in status.items())


def _interactive(f: Files) -> str:
    import json

    from experiments.analysis.compute import Placed
    from experiments.core.store import write_text_atomic
    from experiments.report import render
    placed = Placed.read(f.placements, f.workload_knees, f.datasheet_predictions)
    parts = render.interactive_parts(_dataset(f), _frame(f.ceilings), placed)
    write_text_atomic(f.interactive, json.dumps(parts))
    return f"interactive roofline -> {f.interactive}"


def _report(f: Files) -> str:
    import json

    from experiments.analysis.compute import Placed
    from experiments.report import render
    from experiments.core.layout import VALIDATION
    placed = Placed.read(f.placements, f.workload_knees, f.datasheet_predictions,
                         Path(f.placements).parent / VALIDATION)
    ds, ceilings, claims = _dataset(f), _frame(f.ceilings), _frame(f.claims)
    render.render(ds, ceilings, _sheets(f), f.figures, claims, _frame(f.knees), placed,
                  out=f.report, plot=json.loads(Path(f.interactive).read_text()))
    if not f.summary:
        return f"report -> {f.report}"
    from experiments.analysis.health import shared_gpus
    from experiments.core.store import write_text_atomic
    from experiments.report import summary
    write_text_atomic(f.summary, summary.text(ceilings, claims, Path(f.report),
                                              shared=shared_gpus(ds.rows)) + "\n")
    return f"report -> {f.report}, its summary -> {f.summary}"


@dataclass(frozen=True)
class Step:
    """One aggregate step: `reads` and `writes` map a Files key to its command-line option
    ('' for the dataset, the first argument of every step after collect)."""

    name: str
    help: str
    reads: dict[str, str]
    writes: dict[str, str]
    run: Callable[[Files], str]

    def argv(self, files: Files) -> list[str]:
        """The step's `python -m experiments.steps` arguments for `files`."""
        return [self.name] + [a for key, opt in {**self.reads, **self.writes}.items()
                              for a in ([opt] if opt else []) + [str(getattr(files, key))]]

    def command(self, files: Files) -> str:
        """The step's whole command line for `files`, quoted for a shell."""
        import shlex
        return shlex.join([*COMMAND.split(), *self.argv(files)])

    def shell(self, **where: str) -> str:
        """The step's command for a Snakemake rule: each file is the rule's input or output of
        the same name ({input.ceilings:q}), or what `where` gives for it ({params.figures:q})."""
        def arg(key, opt, kind):
            return ([opt] if opt else []) + [where.get(key, f"{{{kind}.{key}:q}}")]
        return " ".join([COMMAND, self.name]
                        + [a for key, opt in self.reads.items() for a in arg(key, opt, "input")]
                        + [a for key, opt in self.writes.items() for a in arg(key, opt, "output")])


_DATA = {"dataset": ""}
STEPS: dict[str, Step] = {s.name: s for s in (
    Step("roofline", "fit the ceilings", _DATA, {"ceilings": "--out"}, _roofline),
    Step("decode", "predict and measure every decode knee",
         _DATA | {"ceilings": "--ceilings"}, {"knees": "--out", "decode_model": "--points"},
         _decode),
    Step("claims", "judge every claim on every system (and print them)",
         _DATA | {"ceilings": "--ceilings", "knees": "--knees", "datasheets": "--datasheets"},
         {"claims": "--out"}, _claims),
    Step("placements", "place and predict every workload call and op; each workload's batch "
         "knees; every call on the datasheet devices",
         _DATA | {"ceilings": "--ceilings", "datasheets": "--datasheets"},
         {"placements": "--out", "workload_knees": "--workload-knees",
          "datasheet_predictions": "--datasheet-predictions"}, _placements),
    Step("interactive", "build the report's interactive roofline (Bokeh)",
         _DATA | {"ceilings": "--ceilings", "placements": "--placements",
                  "workload_knees": "--workload-knees",
                  "datasheet_predictions": "--datasheet-predictions"},
         {"interactive": "--out"}, _interactive),
    Step("figures", "draw every figure (SVG)",
         _DATA | {"ceilings": "--ceilings", "knees": "--knees", "decode_model": "--decode-model",
                  "datasheets": "--datasheets"}, {"figures": "--outdir"}, _figures),
    Step("report", "render the self-contained HTML report",
         _DATA | {"ceilings": "--ceilings", "knees": "--knees", "claims": "--claims",
                  "placements": "--placements", "workload_knees": "--workload-knees",
                  "datasheet_predictions": "--datasheet-predictions",
                  "datasheets": "--datasheets", "figures": "--figures",
                  "interactive": "--interactive"},
         {"report": "--out", "summary": "--summary"}, _report),
)}
AFTER_COLLECT = tuple(STEPS)  # in order: each reads only what the ones before it wrote


def run(name: str, files: Files) -> str:
    """Do step `name` on `files`; returns what it reports (a line per thing made)."""
    return STEPS[name].run(files)
