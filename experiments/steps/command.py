"""The analysis commands the workflow's aggregate rules run (each also works by hand):

    python -m experiments.steps collect OUT FILE... [--published P ...] [--scan DIR]
    python -m experiments.steps roofline DATASET --out results/roofline/ceilings.parquet
    python -m experiments.steps decode DATASET --ceilings C --out results/roofline/knees.parquet
        --points results/roofline/decode_model.parquet
    python -m experiments.steps claims DATASET --ceilings C --knees K --out results/claims.parquet
    python -m experiments.steps placements DATASET --ceilings C --out results/placements.parquet
        --workload-knees results/workload_knees.parquet
        --datasheet-predictions results/datasheet_predictions.parquet
    python -m experiments.steps interactive DATASET --ceilings C --placements P
        --workload-knees WK --datasheet-predictions DP --out results/roofline/interactive.json
    python -m experiments.steps figures DATASET --ceilings C --knees K --decode-model M
        --outdir results/figures
    python -m experiments.steps report DATASET --ceilings C --knees K --claims CL
        --placements P --workload-knees WK --datasheet-predictions DP --figures DIR
        --interactive I --out report.html [--summary summary.txt]

DATASET is the merged file `collect` writes (results/measurements.parquet). The command's name
is experiments/steps/__main__.py."""

from __future__ import annotations

import argparse
import sys

from experiments.core.store import DatasetError
from experiments.steps import pipeline

DATASHEETS = pipeline.DATASHEETS
# what each file is, for --help (the steps themselves: experiments/steps/pipeline.py)
HELP = {"dataset": "merged measurements (from `collect`)",
        "ceilings": "ceilings.parquet (from `roofline`)", "knees": "knees.parquet (from `decode`)",
        "decode_model": "the prediction per decode row (from `decode --points`)",
        "claims": "claims.parquet (from `claims`)",
        "placements": "placements.parquet (from `placements`)",
        "workload_knees": "workload_knees.parquet (from `placements --workload-knees`)",
        "datasheet_predictions": "datasheet_predictions.parquet (from `placements "
                                 "--datasheet-predictions`)",
        "figures": "directory holding the figures", "datasheets": "reference devices (YAML)",
        "interactive": "interactive.json (from `interactive`)"}
OPTIONAL = {("claims", "claims"): "writes claims.parquet here; without it, only print",
            ("placements", "workload_knees"): "writes the workloads' batch knees here; without "
                                              "it, they are not computed",
            ("placements", "datasheet_predictions"): "writes every call predicted on the "
                                                     "datasheet devices here; without it, not "
                                                     "computed",
            ("report", "summary"): "writes the one-screen summary (ceilings, claims tally) "
                                   "here; without it, not written"}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m experiments.steps", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="merge measurement files and published sets")
    c.add_argument("out")
    c.add_argument("files", nargs="*")
    c.add_argument("--published", nargs="*", default=[],
                   help="published datasets; a missing one is skipped with a message")
    c.add_argument("--scan", help="the measurements folder: its Parquet files not collected "
                                  "are listed (metadata `ignored`) with the reason")
    for step in pipeline.STEPS.values():
        s = sub.add_parser(step.name, help=step.help)
        for key, opt in {**step.reads, **step.writes}.items():
            what = HELP[key] if key in step.reads else f"writes {key.replace('_', ' ')} here"
            optional = OPTIONAL.get((step.name, key))
            if not opt:
                s.add_argument(key, help=what)
            elif key == "datasheets":
                s.add_argument(opt, dest=key, default=DATASHEETS, metavar="YAML", help=what)
            else:
                s.add_argument(opt, dest=key, required=not optional, metavar="PATH",
                               help=optional or what)
        if "datasheets" not in step.reads:  # accepted by every step, as it always was
            s.add_argument("--datasheets", default=DATASHEETS, help=HELP["datasheets"])
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "collect":
            pipeline.collect(args.files, args.published, out=args.out, scan=args.scan)
            return 0
        files = pipeline.Files(**{k: getattr(args, k) for k in pipeline.FILE_KEYS
                                  if hasattr(args, k)})
        report = pipeline.run(args.command, files)  # reads the dataset first: bad input stops it
    except DatasetError as exc:
        print(f"rooflab: {exc}", file=sys.stderr)
        return 2
    for line in filter(None, report.splitlines()):
        print(f"rooflab: {line}", file=sys.stderr)
    return 0


def run(argv=None) -> int:
    """main, with any failure stated in one line on stderr (the rule's log), traceback after it:
    the step, the file it read and, where the analysis named them, the rows it was reading."""
    try:
        return main(argv)
    except Exception as exc:
        import traceback

        from experiments.analysis.dataset import rows_read
        args = list(argv if argv is not None else sys.argv[1:]) or ["?"]
        where = f" on {args[1]}" if len(args) > 1 else ""
        rows = rows_read(exc)
        print(f"rooflab: {args[0]}{pipeline.FAILED}{where}" + (f", reading {rows}" if rows else "")
              + f": {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        traceback.print_exc()
        return 1
