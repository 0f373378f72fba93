# rooflab: measure, collect, fit the roofline, report.  Run: snakemake --cores all
# Rules only wire; the logic is in the `experiments` package (python -m experiments ...).
from snakemake.utils import min_version

min_version("8.0")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/measure.smk"
include: "workflow/rules/aggregate.smk"


rule all:
    input:
        f"{RESULTS}/report.html",
    default_target: True
