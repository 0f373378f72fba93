"""Where a run's files lie under its results folder, and a published set's in its folder: the one
home of that layout. The workflow's rules, collect's scan of the measurements folder, the sweep's
checks, the aggregate steps (experiments/steps/pipeline.py Files.under), the published sets'
rebuild and the commands that read a results folder all read it."""

from __future__ import annotations

from pathlib import Path

MEASUREMENTS = "measurements"  # the job files' folder
# one job's file below it: its host, device slug, experiment, and dtype (or workload-dtype)
JOB_PARTS = ("host", "device", "experiment", "case")
MEASUREMENT = MEASUREMENTS + "/{host}/{device}/{experiment}/{case}.parquet"
MEASUREMENT_GLOB = MEASUREMENTS + "/*/*/*/*.parquet"  # every job's file, this host's or another's
# as a message shows it to a person
MEASUREMENT_SHOWN = MEASUREMENT.format(host="<host>", device="<device>",
                                       experiment="<experiment>", case="<dtype>")
JOB_LOG = "logs/{host}/{device}/{experiment}/{case}.log"
# what shaped a job (its command line and inputs' digest), rewritten only when that changes: an
# input newer than the job's file reruns it even where Snakemake's own records are gone
JOB_STAMP = ".stamps/{host}/{device}/{experiment}/{case}.txt"
STEP_LOGS = "logs/aggregate"  # each aggregate step's log
# the aggregate steps' files (Files' keys); figures is a folder
AGGREGATE = {"dataset": "measurements.parquet", "ceilings": "roofline/ceilings.parquet",
             "knees": "roofline/knees.parquet", "decode_model": "roofline/decode_model.parquet",
             "claims": "claims.parquet", "placements": "placements.parquet",
             "workload_knees": "workload_knees.parquet",
             "datasheet_predictions": "datasheet_predictions.parquet", "figures": "figures",
             "interactive": "roofline/interactive.json", "report": "report.html",
             "summary": "summary.txt", "logs": STEP_LOGS}
# `rooflab validate`'s summary beside the placements (not the workflow's): read where it exists
VALIDATION = "validation/summary.parquet"
FIGURE_INDEX = "index.json"  # in the figures folder: each figure's placeholder reason, or null
# A published set's folder (results/published/<set>/): its own measurement files, and beside them,
# flat, the files the steps derived from them (published_file; experiments/steps/published.py)
PUBLISHED_MEASUREMENTS = {"sweep": "measurements.parquet", "workloads": "workloads.parquet",
                          "modules": "modules.parquet", "op_rates": "op_rates.parquet"}
PUBLISHED_DERIVED = ("ceilings", "knees", "claims", "placements", "workload_knees",
                     "datasheet_predictions")


def under(results, relative: str) -> str:
    """`relative` in the results folder, joined as the workflow's rules join it."""
    return f"{results}/{relative}"


def file(results, key: str) -> Path:
    """The aggregate step file `key` (an AGGREGATE key) of a results folder."""
    return Path(results) / AGGREGATE[_known(key)]


def published_file(folder, key: str) -> Path:
    """The aggregate step file `key` (an AGGREGATE key) of a published set's folder: flat."""
    return Path(folder) / Path(AGGREGATE[_known(key)]).name


def _known(key: str) -> str:
    if key not in AGGREGATE:
        raise KeyError(f"{key!r} is no aggregate file (AGGREGATE: {', '.join(AGGREGATE)})")
    return key
