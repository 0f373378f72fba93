# rooflab: measure, collect, fit the roofline, report.  Run: snakemake --cores all
# Rules only wire; the logic is in the `experiments` package (python -m experiments ...).
import os
import sys

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version

from experiments.sweep import forkserver

# Jobs fork from one process that has imported torch, pandas and Hydra once
# (experiments/sweep/forkserver.py): ~1.5 s of start-up per job saved. Local runs only: a cluster job runs as its
# own process; ROOFLAB_FORKSERVER=off turns it off. Launched first, so its imports run beside
# Snakemake's (torch's: common.smk's sweep checks import the experiment modules) and its DAG;
# onstart waits for it, or stops it when the jobs go to a cluster.
if forkserver.runs_jobs(sys.argv) and not (getattr(workflow, "remote_exec", False)
                                           or getattr(workflow, "subprocess_exec", False)):
    forkserver.launch()

from experiments.core.config import yaml_error  # noqa: E402
from experiments.sweep.checks import results_problem  # noqa: E402
from experiments.core.paths import shipped  # noqa: E402

min_version("8.0")

# This file's folder: the checkout, or the copy inside an installed package (`rooflab run` runs
# that with the working directory elsewhere; results land there). Files the workflow ships
# (config/..., results/published/...) are the working directory's own if it has them, else
# this folder's: shipped(path, ROOT).
ROOT = os.path.abspath(workflow.basedir or ".")
CONFIG = str(shipped("config/config.yaml", ROOT))

# Snakemake's own message for a YAML error names neither the file nor the line.
if _why := yaml_error(CONFIG):
    raise WorkflowError(_why)


configfile: CONFIG


report: "workflow/report/workflow.rst"


onstart:
    if workflow.non_local_exec:
        forkserver.stop()
    else:
        forkserver.start()


onsuccess:
    forkserver.stop()


onerror:
    forkserver.stop()
    # a disk that filled (or went read-only) mid-run: the jobs' logs are empty, so say it here
    if _why := results_problem(RESULTS):
        print(f"rooflab: {_why}", file=sys.stderr)


include: "workflow/rules/common.smk"
include: "workflow/rules/measure.smk"
include: "workflow/rules/aggregate.smk"


rule all:
    input:
        FILES.report,
        # Named here, not only as inputs of up-to-date jobs: Snakemake 9 does not rebuild a missing
        # file that no job it runs needs, so a deleted job file or dataset would stay missing.
        measurement_files(),
        FILES.dataset,
        FILES.ceilings,
    default_target: True
