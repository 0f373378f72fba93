"""The committed published reports, kept in step with the code.

    python -m experiments.report.published results/published/h200 [...]

rebuilds a published folder's ceilings, knees, claims and report.html from its measurement files
(measurements.parquet and, where there is one, workloads.parquet: both its own rows) by the
workflow's analysis steps. `text(folder)` renders the report again from the committed files, the
way tests/test_published.py checks that the committed report is what the code renders now.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path

import pandas as pd

from experiments.analysis import dataset, datasheets
from experiments.core.paths import config_dir

FILES = ("measurements.parquet", "workloads.parquet")


def merged(folder: Path, out: Path) -> Path:
    """The folder's measurement files collected into `out`."""
    files = [folder / f for f in FILES if (folder / f).is_file()]
    dataset.collect(files, out=out, log=lambda msg: None)
    return out


def rebuild(folder) -> Path:
    """Fit, judge, draw and render the folder's report; writes its ceilings, knees, claims and
    report.html beside its measurements (figures are inlined; the folder keeps no figures/)."""
    from experiments.analysis.__main__ import run

    folder = Path(folder)
    sheets = str(config_dir() / "datasheets.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = str(merged(folder, tmp / "measurements.parquet"))
        c, k, m, cl = (str(tmp / f) for f in ("ceilings.parquet", "knees.parquet",
                                              "model.parquet", "claims.parquet"))
        steps = [["roofline", data, "--out", c],
                 ["decode", data, "--ceilings", c, "--out", k, "--points", m],
                 ["claims", data, "--ceilings", c, "--knees", k, "--datasheets", sheets,
                  "--out", cl],
                 ["figures", data, "--ceilings", c, "--knees", k, "--decode-model", m,
                  "--datasheets", sheets, "--outdir", str(tmp / "figures")],
                 ["report", data, "--ceilings", c, "--knees", k, "--claims", cl,
                  "--datasheets", sheets, "--figures", str(tmp / "figures"),
                  "--out", str(tmp / "report.html")]]
        for step in steps:
            if status := run(step):
                raise SystemExit(status)
        for name in ("ceilings.parquet", "knees.parquet", "claims.parquet", "report.html"):
            shutil.copyfile(tmp / name, folder / name)
    return folder / "report.html"


def text(html: str) -> str:
    """What a reader reads, as the published check compares it: no scripts, styles, figures or
    generation time; whitespace folded."""
    html = re.sub(r"<(script|style|svg|figure)\b.*?</\1>", " ", html, flags=re.S)
    html = re.sub(r"Generated \d{4}-\d\d-\d\d \d\d:\d\d UTC", "Generated (date)", html)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def rendered(folder) -> str:
    """The folder's report rendered again from its committed files (no figures: text only)."""
    from experiments.report import render

    folder = Path(folder)
    with tempfile.TemporaryDirectory() as tmp:
        ds = dataset.load(merged(folder, Path(tmp) / "measurements.parquet"))
        return render.render(ds, pd.read_parquet(folder / "ceilings.parquet"),
                             datasheets.load(config_dir() / "datasheets.yaml"), Path(tmp),
                             pd.read_parquet(folder / "claims.parquet"),
                             pd.read_parquet(folder / "knees.parquet"))


if __name__ == "__main__":
    for path in sys.argv[1:] or sys.exit(__doc__):
        print(f"rooflab: {rebuild(path)}", file=sys.stderr)
