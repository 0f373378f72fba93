"""The `rooflab` command.

    rooflab run [--quick | --full] [--cores N] [--results DIR] [SNAKEMAKE ARGS ...]
    rooflab place TARGET [--device ...]     # the same as python -m experiments place
    rooflab report [--results DIR] [--claims]
    rooflab validate [--results DIR] [--seed N] [--count N] [--device D ...]
    rooflab compare A B [--out compare.html | compare.csv]

`run` runs the Snakemake workflow (the sweep) with this directory as its working directory:
results land in ./results. It takes ./config/config.yaml when there is one, else the shipped
sweep; any argument it does not know goes to Snakemake as it is (after `--` too).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from experiments.cli import stopping
from experiments.core import layout
from experiments.core.paths import MissingFiles, shipped, workflow_root

PRESETS = ("quick", "full")


class Parser(argparse.ArgumentParser):
    """Bad input: one line naming what is wrong, exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def cores(value: str) -> str:
    if value == "all" or (value.isdigit() and int(value) > 0):
        return value
    raise argparse.ArgumentTypeError(f"--cores {value!r}: give a number > 0 or 'all'")


def parser() -> Parser:
    p = Parser(prog="rooflab", description="Measure where this machine's operations sit on the "
               "roofline, and check the article's claims against them.",
               epilog="rooflab COMMAND --help says more about each.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True,
                           parser_class=Parser)
    r = sub.add_parser(
        "run", help="measure this machine: the Snakemake sweep, up to results/report.html",
        description="Run the sweep (Snakemake) in this directory; results land in ./results "
                    "(or --results). Takes ./config/config.yaml if present, else the shipped "
                    "config. Unknown arguments, and all after `--`, go to Snakemake: targets, "
                    "-n, --config KEY=VALUE, --configfile FILE, ...",
        allow_abbrev=False)  # --qu... and the like are Snakemake's, not ours
    preset = r.add_mutually_exclusive_group()
    preset.add_argument("--quick", action="store_true",
                        help="the quick preset: every experiment, fewer dtypes and sizes")
    preset.add_argument("--full", action="store_true",
                        help="the full preset: longer budgets, wider and finer sweeps")
    r.add_argument("--cores", type=cores, help="cores Snakemake may use (default: all)")
    r.add_argument("--results", help="results folder (default: the config's, results)")
    r.add_argument("--claims", action="store_true",
                   help="after the summary, each claim's verdict and numbers")
    sub.add_parser("place", help="place a callable on this device's roofline "
                                 "(rooflab place --help)", add_help=False)
    sub.add_parser("validate", help="judge the op model on held-out torch modules drawn from "
                                    "a seed (rooflab validate --help)", add_help=False)
    rep = sub.add_parser("report", help="rebuild the report from results already measured",
                         description="Fit, judge, draw and render RESULTS/report.html from "
                                     "RESULTS/measurements.parquet; nothing is measured.")
    rep.add_argument("--results", default="results", help="results folder (default: results)")
    rep.add_argument("--datasheets", help="reference devices (default: ./config/datasheets.yaml "
                                          "if present, else the shipped one)")
    rep.add_argument("--claims", action="store_true",
                     help="after the summary, each claim's verdict and numbers")
    c = sub.add_parser("compare", help="two datasets side by side: ceilings and claims",
                       description="Fit both datasets and show their ceilings with the ratio "
                                   "B/A, and the claims whose verdicts differ. A and B: a "
                                   "measurements.parquet file or a results folder.")
    c.add_argument("a", metavar="A")
    c.add_argument("b", metavar="B")
    c.add_argument("--out", help="also write the comparison: .html (one page, its CSV beside "
                                 "it) or .csv (ceilings, claims and workloads, raw numbers)")
    c.add_argument("--datasheets", help="reference devices (as for report)")
    p.commands = sub.choices
    return p


def _with(args: list[str], names: tuple[str, ...], values: list[str]) -> list[str]:
    """Snakemake arguments with `values` given to option `names[0]`: put first in its list where
    the user gave the option already (Snakemake keeps only the last occurrence), else appended.
    Appended at the end: Snakemake needs targets before --config, whose list runs to the next
    option."""
    out = []
    for a in args:  # --configfile=x -> --configfile x, so the values can go first
        out += a.split("=", 1) if a.split("=", 1)[0] in names else [a]
    for i, a in enumerate(out):
        if a in names:
            return out[:i + 1] + values + out[i + 1:]
    return out + [names[0], *values]


def snakemake_args(args, extra: list[str], root: Path) -> list[str]:
    """`python -m snakemake` arguments for `rooflab run`."""
    if "--" in extra:  # argparse leaves it in; Snakemake would take what follows as targets
        i = extra.index("--")
        extra = extra[:i] + extra[i + 1:]
    cmd = ["--snakefile", str(root / "Snakefile")]
    if not any(a.split("=")[0] == "--workflow-profile" for a in extra):
        # Snakemake finds the default profile only beside a Snakefile in the working directory
        cmd += ["--workflow-profile", str(root / "workflow" / "profiles" / "default")]
    if args.cores:
        cmd += ["--cores", args.cores]
    for name in PRESETS:
        if getattr(args, name):
            extra = _with(extra, ("--configfile", "--configfiles"),
                          [str(root / "config" / "presets" / f"{name}.yaml")])
    if args.results:
        extra = _with(extra, ("--config", "-C"), [f"results={args.results}"])
    return cmd + extra


def config_files(extra: list[str]) -> list[str]:
    """The files given to Snakemake's --configfile(s) (each word after the option, up to the
    next option; or --configfile=PATH)."""
    files, taking = [], False
    for word in extra:
        name, eq, value = word.partition("=")
        if name in ("--configfile", "--configfiles"):
            files += [value] if eq else []
            taking = not eq
        elif word.startswith("-"):
            taking = False
        elif taking:
            files.append(word)
    return files


def run(args, extra: list[str]) -> int:
    # Snakemake reads a --configfile before the workflow and says only "not valid JSON or YAML":
    # name the file and line here, before anything runs.
    from experiments.core.config import yaml_error

    for path in config_files(extra):
        if not Path(path).is_file():
            print(f"rooflab run: --configfile {path}: no such file", file=sys.stderr)
            return 2
        if why := yaml_error(path):
            print(f"rooflab run: bad config file: {why}", file=sys.stderr)
            return 2
    if why := places_to_write(args, extra):
        print(f"rooflab run: {why}", file=sys.stderr)
        return 2
    root = workflow_root()
    # -P: the working directory is not put ahead of the standard library (a random.py there)
    python = [sys.executable, *(["-P"] if sys.version_info >= (3, 11) else [])]
    cmd = [*python, "-m", "snakemake", *snakemake_args(args, extra, root)]
    # Jobs run `python -m experiments`: this interpreter's, even from a venv not activated.
    env = os.environ | {"PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                                 os.environ.get("PATH", "")])}
    print(f"rooflab: snakemake {' '.join(cmd[len(python) + 2:])}", file=sys.stderr, flush=True)
    started = time.time()
    workdir = Path(directory(extra))
    results = workdir / results_folder(args, extra)
    status, signum = stopping.call(cmd, env, workdir, results)
    if signum:  # Snakemake, its jobs and the fork server are gone, and what they held
        try:
            print(stopping.message(signum), file=sys.stderr, flush=True)
        except OSError:  # the terminal closed (SIGHUP): nobody reads it
            pass
        return 128 + signum
    if status:  # a failed aggregate step's one line, last, where Snakemake's output ends
        from experiments.steps import pipeline
        for line in pipeline.failures(pipeline.Files.under(results).logs, since=started):
            print(line, file=sys.stderr)
    if status == 0 and not {"-n", "--dry-run", "--dryrun"} & set(extra) \
            and layout.file(results, "report").is_file():
        print(_summary(results, args.claims))
    return status


def directory(extra: list[str]) -> str:
    """Snakemake's working directory: its --directory (-d), else this one."""
    for i, word in enumerate(extra):
        name, eq, value = word.partition("=")
        if name in ("--directory", "-d") and (eq or i + 1 < len(extra)):
            return value if eq else extra[i + 1]
    return "."


def results_folder(args, extra: list[str]) -> str:
    """The run's results folder: --results, else a `results=` of --config, else the default."""
    return args.results or next((a.split("=", 1)[1] for a in extra
                                 if a.startswith("results=")), "results")


def places_to_write(args, extra: list[str]) -> str | None:
    """Why a run could not write where it must, with the flag or variable that moves it; None
    where it can: Snakemake's state (.snakemake/ here), the results, the temporary folder (the
    fork server's socket: a MiB is room enough)."""
    import tempfile

    from experiments.core.store import unwritable

    results = results_folder(args, extra)
    if sys.version_info < (3, 11) and (mine := shadowing(Path.cwd())):  # no -P to keep it out
        return (f"{', '.join(mine)} here would shadow Python's own module of that name for "
                "Snakemake: rename it, or run from another directory")
    if why := unwritable(Path.cwd()):
        return (f"this directory ({Path.cwd()}) {why}: Snakemake keeps its state in .snakemake/ "
                "here; run from a writable directory (`rooflab run` finds its workflow anywhere)")
    if why := unwritable(results):
        return f"the results folder {results} {why}; give --results a writable folder"
    temp = os.environ.get("TMPDIR") or tempfile.gettempdir()  # Python's skips a full TMPDIR
    if why := unwritable(temp, 1 << 20):
        return f"the temporary folder {temp} (TMPDIR) {why}; set TMPDIR to a folder with room"
    return None


def shadowing(folder: Path) -> list[str]:
    """The files in `folder` named as a standard-library module (./random.py, ./json/)."""
    names = getattr(sys, "stdlib_module_names", ())
    return sorted(f"./{p.name}" for p in folder.iterdir()
                  if (p.suffix == ".py" and p.stem in names) or (p.is_dir() and p.name in names
                                                                 and (p / "__init__.py").exists()))


def _summary(results: Path, detail: bool) -> str:
    """The report step's summary.txt, where it is as new as the report (the analysis is not
    loaded again); else computed."""
    written, report = layout.file(results, "summary"), layout.file(results, "report")
    if not detail and written.is_file() and written.stat().st_mtime >= report.stat().st_mtime:
        return written.read_text().rstrip("\n")
    from experiments.report.summary import summary
    return summary(results, detail=detail)


def report(args) -> int:
    """The aggregate steps after `collect` (experiments/steps/pipeline.py), as the workflow runs
    them: RESULTS/measurements.parquet -> ceilings, knees, claims, placements, figures,
    report.html."""
    from experiments.steps import pipeline
    from experiments.steps.command import run as analysis

    sheets = args.datasheets or str(shipped("config/datasheets.yaml"))
    files = pipeline.Files.under(args.results, datasheets=sheets)
    data = Path(files.dataset)
    if not data.is_file():
        print(f"rooflab report: {data} not found; `rooflab run` measures and collects it",
              file=sys.stderr)
        return 2
    if not Path(sheets).is_file():
        print(f"rooflab report: --datasheets {sheets}: no such file", file=sys.stderr)
        return 2
    from experiments.core.store import unwritable

    if why := unwritable(args.results):
        print(f"rooflab report: the results folder {args.results} {why}; the report is written "
              "beside its measurements: copy them to a writable folder and give it",
              file=sys.stderr)
        return 2
    import contextlib
    import io

    from experiments.analysis.rowcheck import DROPPED

    said: set[str] = set()  # rows left out: every step reads the dataset, one line says it
    for step in pipeline.AFTER_COLLECT:  # a step's lines kept for a failure; the summary says the rest
        log = io.StringIO()
        with contextlib.redirect_stderr(log):
            status = analysis(pipeline.STEPS[step].argv(files))
        if status:  # its error line here, its traceback in its log, as the workflow keeps it
            path = Path(files.logs) / f"{step}.log"
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(log.getvalue())
            except OSError:  # the place filled up meanwhile: the whole log here, then
                print(log.getvalue(), end="", file=sys.stderr)
                return status
            print("\n".join(pipeline.failure_lines(log.getvalue(), path)) or log.getvalue(),
                  file=sys.stderr)
            return status
        for line in log.getvalue().splitlines():
            if DROPPED in line and line not in said:
                print(line, file=sys.stderr)
                said.add(line)
    from experiments.report.summary import summary
    print(summary(Path(args.results), detail=args.claims))
    return 0


def compare(args) -> int:
    from experiments.report import compare as cmp, compare_page, compare_text
    from experiments.core.store import DatasetError

    if args.out and Path(args.out).suffix not in (".html", ".csv"):
        print(f"rooflab compare: --out {args.out}: give a .html or .csv file", file=sys.stderr)
        return 2
    from experiments.core.store import CannotWrite, unwritable

    if args.out and (why := unwritable(folder := Path(args.out).absolute().parent)):
        print(f"rooflab compare: --out {args.out}: its folder {folder} {why}; give --out a "
              "writable path", file=sys.stderr)
        return 2
    sheets = args.datasheets or str(shipped("config/datasheets.yaml"))
    try:
        a, b, ceilings, claims = cmp.compare(args.a, args.b, sheets)
    except (DatasetError, FileNotFoundError) as exc:
        print(f"rooflab compare: {exc}", file=sys.stderr)
        return 2
    calls = cmp.workloads_table(a, b)
    print(compare_text.text(a, b, ceilings, claims, calls))
    if args.out:
        try:
            for path in compare_page.write(args.out, a, b, ceilings, claims, calls):
                print(f"rooflab compare: wrote {path}", file=sys.stderr)
        except CannotWrite as exc:  # filled up meanwhile
            print(f"rooflab compare: {exc}; give --out a writable path", file=sys.stderr)
            return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["place"]:  # its own parser (experiments/cli/place.py), arguments untouched
            from experiments.cli.place import main as place_main
            return place_main(argv[1:], prog="rooflab place")
        if argv[:1] == ["validate"]:  # its own parser too (experiments/cli/validate.py)
            from experiments.cli.validate import main as validate_main
            return validate_main(argv[1:])
        p = parser()
        args, extra = p.parse_known_args(argv)
        if args.command == "run":  # what it does not know goes to Snakemake
            return run(args, extra)
        if extra:  # anything else unknown is an error, named by its command
            p.commands[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
        return report(args) if args.command == "report" else compare(args)
    except MissingFiles as exc:
        print(f"rooflab: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before `run` started Snakemake, or in another command
        print(stopping.message(signal.SIGINT, run=False), file=sys.stderr)
        return 128 + signal.SIGINT


if __name__ == "__main__":
    sys.exit(main())
