# rooflab: measure, collect, fit the roofline, report.  Run: snakemake --cores all
# Rules only wire; the logic is in the `experiments` package (python -m experiments ...).
from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version

from experiments.config import yaml_error

min_version("8.0")

# Snakemake's own message for a YAML error names neither the file nor the line.
if _why := yaml_error("config/config.yaml"):
    raise WorkflowError(_why)


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/measure.smk"
include: "workflow/rules/aggregate.smk"


rule all:
    input:
        f"{RESULTS}/report.html",
        # Named here, not only as inputs of up-to-date jobs: Snakemake 9 does not rebuild a missing
        # file that no job it runs needs, so a deleted job file or dataset would stay missing.
        measurement_files(),
        f"{RESULTS}/measurements.parquet",
        f"{RESULTS}/roofline/ceilings.parquet",
    default_target: True
