"""The analysis commands the workflow's aggregate rules run (each also works by hand):

    python -m experiments.analysis collect OUT FILE... [--published P ...] [--scan DIR]
    python -m experiments.analysis roofline DATASET --out results/roofline/ceilings.parquet
    python -m experiments.analysis figures DATASET --ceilings C --outdir results/figures
    python -m experiments.analysis report DATASET --ceilings C --figures DIR --out report.html
    python -m experiments.analysis claims DATASET --ceilings C     # the claims table as text

DATASET is the merged file `collect` writes (results/measurements.parquet)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..core.store import DatasetError, write_atomic

DATASHEETS = str(Path(__file__).resolve().parents[2] / "config" / "datasheets.yaml")


def _common(p, ceilings=True):
    p.add_argument("dataset", help="merged measurements (from `collect`)")
    if ceilings:
        p.add_argument("--ceilings", required=True, help="ceilings.parquet (from `roofline`)")
    p.add_argument("--datasheets", default=DATASHEETS, help="reference devices (YAML)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.analysis", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("collect", help="merge measurement files and published sets")
    p.add_argument("out")
    p.add_argument("files", nargs="*")
    p.add_argument("--published", nargs="*", default=[],
                   help="published datasets; a missing one is skipped with a message")
    p.add_argument("--scan", help="the measurements folder: its Parquet files not collected "
                                  "are listed (metadata `ignored`) with the reason")
    p = sub.add_parser("roofline", help="fit the ceilings")
    _common(p, ceilings=False)
    p.add_argument("--out", required=True)
    p = sub.add_parser("figures", help="draw every figure (PNG and SVG)")
    _common(p)
    p.add_argument("--outdir", required=True)
    p = sub.add_parser("report", help="render the self-contained HTML report")
    _common(p)
    p.add_argument("--figures", required=True, help="directory holding the figures")
    p.add_argument("--out", required=True)
    p = sub.add_parser("claims", help="print the claims table")
    _common(p)
    args = parser.parse_args(argv)

    # Imported here: `collect` should not pay for matplotlib and scipy.
    from . import dataset
    try:
        if args.command == "collect":
            dataset.collect(args.files, args.published, out=args.out, scan=args.scan)
            return 0
        ds = dataset.load(args.dataset)
    except DatasetError as exc:
        print(f"rooflab: {exc}", file=sys.stderr)
        return 2
    import pandas as pd
    import pyarrow as pa

    from . import claims, datasheets, decode, figures, report, roofline
    if args.command == "roofline":
        table = roofline.fit(ds)
        write_atomic(pa.Table.from_pandas(table, preserve_index=False), args.out)
        fitted = table[table.value.notna()]
        print(f"rooflab: {len(fitted)} ceilings fitted, {len(table) - len(fitted)} not "
              f"(see their notes) -> {args.out}", file=sys.stderr)
        return 0
    ceilings = pd.read_parquet(args.ceilings)
    sheets = datasheets.load(args.datasheets)
    if args.command == "figures":
        per_row, knees = decode.predict(ds, ceilings)
        status = figures.draw_all(figures.Inputs(ds, ceilings, sheets, per_row, knees),
                                  args.outdir)
        (Path(args.outdir) / "index.json").write_text(json.dumps(status, indent=1))
        for name, why in status.items():
            print(f"rooflab: figure {name}: " + (f"placeholder ({why})" if why else "drawn"),
                  file=sys.stderr)
    elif args.command == "report":
        report.render(ds, ceilings, sheets, args.figures, out=args.out)
        print(f"rooflab: report -> {args.out}", file=sys.stderr)
    elif args.command == "claims":
        _, knees = decode.predict(ds, ceilings)
        table = claims.evaluate(ds, ceilings, sheets, knees)
        for _, r in table.iterrows():
            text = "; ".join(t for t in (r.measurement, r.reason) if t)
            print(f"{r.claim:<4} {r.verdict:<20} {r.system}: {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
