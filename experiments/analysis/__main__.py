"""The analysis commands the workflow's aggregate rules run (each also works by hand):

    python -m experiments.analysis collect OUT FILE... [--published P ...] [--scan DIR]
    python -m experiments.analysis roofline DATASET --out results/roofline/ceilings.parquet
    python -m experiments.analysis decode DATASET --ceilings C --out results/roofline/knees.parquet
        --points results/roofline/decode_model.parquet
    python -m experiments.analysis claims DATASET --ceilings C --knees K --out results/claims.parquet
    python -m experiments.analysis figures DATASET --ceilings C --knees K --decode-model M
        --outdir results/figures
    python -m experiments.analysis placements DATASET --ceilings C --out results/placements.parquet
    python -m experiments.analysis report DATASET --ceilings C --knees K --claims CL
        --figures DIR --out report.html

DATASET is the merged file `collect` writes (results/measurements.parquet)."""

from __future__ import annotations

from experiments.sweep.forkserver import delegate

delegate("experiments.analysis")  # to the run's fork server if any (imports done there)

import argparse
import json
import sys
from pathlib import Path

from experiments.core.store import DatasetError, write_atomic
from experiments.core.paths import config_dir

DATASHEETS = str(config_dir() / "datasheets.yaml")


def _common(p, ceilings=True, knees=False, claims=False):
    p.add_argument("dataset", help="merged measurements (from `collect`)")
    if ceilings:
        p.add_argument("--ceilings", required=True, help="ceilings.parquet (from `roofline`)")
    if knees:
        p.add_argument("--knees", required=True, help="knees.parquet (from `decode`)")
    if claims:
        p.add_argument("--claims", required=True, help="claims.parquet (from `claims`)")
    p.add_argument("--datasheets", default=DATASHEETS, help="reference devices (YAML)")


def _write(frame, path):
    import pyarrow as pa
    write_atomic(pa.Table.from_pandas(frame, preserve_index=False), path)


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
    p = sub.add_parser("decode", help="predict and measure every decode knee")
    _common(p)
    p.add_argument("--out", required=True, help="knees.parquet")
    p.add_argument("--points", required=True, help="the prediction per decode row (Parquet)")
    p = sub.add_parser("claims", help="judge every claim on every system (and print them)")
    _common(p, knees=True)
    p.add_argument("--out", help="claims.parquet; without it, only print")
    p = sub.add_parser("figures", help="draw every figure (PNG and SVG)")
    _common(p, knees=True)
    p.add_argument("--decode-model", required=True, help="from `decode --points`")
    p.add_argument("--outdir", required=True)
    p = sub.add_parser("placements", help="place and predict every workload call and op")
    _common(p)
    p.add_argument("--out", required=True, help="placements.parquet")
    p = sub.add_parser("report", help="render the self-contained HTML report")
    _common(p, knees=True, claims=True)
    p.add_argument("--placements", help="placements.parquet (from `placements`); without it, "
                                        "computed here")
    p.add_argument("--figures", required=True, help="directory holding the figures")
    p.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    # Imported here: `collect` should not pay for matplotlib and scipy.
    from experiments.analysis import dataset
    try:
        if args.command == "collect":
            dataset.collect(args.files, args.published, out=args.out, scan=args.scan)
            return 0
        ds = dataset.load(args.dataset)
    except DatasetError as exc:
        print(f"rooflab: {exc}", file=sys.stderr)
        return 2
    import pandas as pd

    from experiments.analysis import datasheets
    if args.command == "roofline":
        from experiments.analysis import roofline
        table = roofline.fit(ds)
        _write(table, args.out)
        fitted = table[table.value.notna()]
        print(f"rooflab: {len(fitted)} ceilings fitted, {len(table) - len(fitted)} not "
              f"(see their notes) -> {args.out}", file=sys.stderr)
        return 0
    ceilings = pd.read_parquet(args.ceilings)
    sheets = datasheets.load(args.datasheets)
    if args.command == "decode":
        from experiments.analysis import knees as decode
        per_row, knees = decode.predict(ds, ceilings)
        _write(knees.reindex(columns=decode.KNEE_COLUMNS), args.out)
        _write(per_row, args.points)
        print(f"rooflab: {len(knees)} decode curves -> {args.out}", file=sys.stderr)
        return 0
    if args.command == "placements":
        return write_placements(ds, ceilings, args.out)
    knees = pd.read_parquet(args.knees)
    if args.command == "claims":
        from experiments.analysis import claims
        table = claims.evaluate(ds, ceilings, sheets, knees)
        if args.out:
            _write(table, args.out)
        for _, r in table.iterrows():
            text = "; ".join(t for t in (r.measurement, r.reason) if t)
            print(f"{r.claim:<4} {r.verdict:<20} {r.system}: {text}",
                  file=sys.stderr if args.out else sys.stdout)
    elif args.command == "figures":  # each step imports only what it needs: matplotlib is slow
        from experiments.report import figures
        per_row = pd.read_parquet(args.decode_model)
        status = figures.draw_all(figures.Inputs(ds, ceilings, sheets, per_row, knees),
                                  args.outdir)
        (Path(args.outdir) / "index.json").write_text(json.dumps(status, indent=1))
        for name, why in status.items():
            print(f"rooflab: figure {name}: " + (f"placeholder ({why})" if why else "drawn"),
                  file=sys.stderr)
    elif args.command == "report":
        from experiments.report import render as report
        report.render(ds, ceilings, sheets, args.figures, pd.read_parquet(args.claims), knees,
                      out=args.out, placements=args.placements)
        print(f"rooflab: report -> {args.out}", file=sys.stderr)
    return 0


def write_placements(ds, ceilings, out) -> int:
    """The placements step: every workload call and op placed and predicted, one file."""
    from experiments.analysis import placements

    table = placements.placement_table(ds, ceilings)
    _write(table, out)
    stats = placements.error_stats(table)
    print(f"rooflab: {len(table)} placements -> {out}; |error| median/p90: " + ", ".join(
        f"{k} {v['median']:.0%}/{v['p90']:.0%} (n={v['n']})" for k, v in stats.items()
        if v["n"]), file=sys.stderr)
    return 0


def run(argv=None) -> int:
    """main, with any failure stated in one line on stderr (the rule's log), traceback after it,
    so a failed aggregation step always leaves its reason in its log."""
    try:
        return main(argv)
    except Exception as exc:
        import traceback
        step = (argv or sys.argv[1:] or ["?"])[0]
        print(f"rooflab: {step} failed: {type(exc).__name__}: {exc}", file=sys.stderr,
              flush=True)
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(run())
