"""The committed published reports, kept in step with the code.

    python -m experiments.steps.published results/published/h200 [...]

rebuilds a published folder's ceilings, knees, claims, placements (with the workloads' batch
knees and their predictions on the datasheet devices) and report.html from its measurement files
(FILES: all its own rows) by the workflow's steps. `rendered(folder)` renders the report again
from the committed files, the way tests/system/steps/test_published.py checks that the committed
report is what the code renders now.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path

import pandas as pd

from experiments.analysis import dataset, datasheets
from experiments.core import layout
from experiments.core.paths import config_dir

# its own rows: the sweep, the workloads under Nsight Compute, torch's modules placed, the rates
# torch's building blocks attain (bench/h200_op_rates.sh; a folder without one places without them)
FILES = tuple(layout.PUBLISHED_MEASUREMENTS.values())
# what the steps derive from them, kept beside them (the report renders from these alone)
DERIVED = layout.PUBLISHED_DERIVED


def merged(folder: Path, out: Path) -> Path:
    """The folder's measurement files collected into `out`."""
    files = [folder / f for f in FILES if (folder / f).is_file()]
    dataset.collect(files, out=out, log=lambda msg: None)
    return out


def rebuild(folder) -> Path:
    """Fit, judge, place, draw and render the folder's report by the workflow's steps
    (experiments/steps/pipeline.py); writes their files (DERIVED) and report.html beside its
    measurements (figures are inlined; the folder keeps no figures/)."""
    from experiments.steps import pipeline
    from experiments.steps.command import run

    folder = Path(folder)
    with tempfile.TemporaryDirectory() as tmp:
        files = pipeline.Files.under(tmp, datasheets=str(config_dir() / "datasheets.yaml"))
        Path(files.ceilings).parent.mkdir()
        merged(folder, Path(files.dataset))
        for step in pipeline.AFTER_COLLECT:
            if status := run(pipeline.STEPS[step].argv(files)):
                raise SystemExit(status)
        for key in (*DERIVED, "report"):
            path = getattr(files, key)
            shutil.copyfile(path, layout.published_file(folder, key))
    return layout.published_file(folder, "report")


def text(html: str) -> str:
    """What a reader reads, as the published check compares it: no scripts, styles, figures or
    generation time; whitespace folded."""
    html = re.sub(r"<(script|style|svg|figure)\b.*?</\1>", " ", html, flags=re.S)
    html = re.sub(r"Generated \d{4}-\d\d-\d\d \d\d:\d\d UTC", "Generated (date)", html)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def rendered(folder) -> str:
    """The folder's report rendered again from its committed files (no figures: text only)."""
    from experiments.analysis.compute import Placed
    from experiments.report import render

    folder = Path(folder)
    placed = Placed.read(*(layout.published_file(folder, key)
                           for key in ("placements", "workload_knees", "datasheet_predictions")))
    with tempfile.TemporaryDirectory() as tmp:
        ds = dataset.load(merged(folder, layout.file(tmp, "dataset")))
        return render.render(ds, pd.read_parquet(layout.published_file(folder, "ceilings")),
                             datasheets.load(config_dir() / "datasheets.yaml"), Path(tmp),
                             pd.read_parquet(layout.published_file(folder, "claims")),
                             pd.read_parquet(layout.published_file(folder, "knees")), placed)


if __name__ == "__main__":
    for path in sys.argv[1:] or sys.exit(__doc__):
        print(f"rooflab: {rebuild(path)}", file=sys.stderr)
