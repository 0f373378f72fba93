# Collect every measurement file (this run's and the published sets) into one dataset, fit the
# roofline, predict and measure the decode knees, judge the claims, place the workloads (their
# batch knees, their predictions on the datasheet devices), build the interactive roofline, draw
# the figures, render the report.
# Each rule is one `python -m experiments.steps` command, its files and command from the
# step's one definition (experiments/steps/pipeline.py); the logic lives in experiments/analysis
# and experiments/report.
import os
import sys

from experiments.steps.pipeline import STEPS, Files
from experiments.report.catalog import FIGURES


# Published datasets that may be absent (not committed, not yet fetched): skip them, saying so.
# A relative path not in the working directory is looked up beside the Snakefile (shipped sets).
PUBLISHED = [str(shipped(p, ROOT)) for p in config.get("published", [])
             if shipped(p, ROOT).exists()]
for _path in sorted({p for p in config.get("published", []) if not shipped(p, ROOT).exists()}):
    print(f"rooflab: published dataset {_path} not found; skipped", file=sys.stderr)
# The reference devices: the working directory's config/datasheets.yaml, else the shipped one.
DATASHEETS = str(shipped("config/datasheets.yaml", ROOT))
FILES = Files.under(RESULTS, DATASHEETS)


# Light work on data already written: run where Snakemake runs, not as cluster jobs.
localrules:
    collect,
    roofline,
    decode_knees,
    claims,
    placements,
    interactive,
    figures,
    report,


rule collect:
    input:
        run=measurement_files(),
        published=PUBLISHED,
    output:
        FILES.dataset,
    conda:
        "../../environment.yml"
    log:
        f"{FILES.logs}/collect.log",
    params:
        # every file under measurements/ is collected or listed as ignored
        scan=lambda wildcards, output: os.path.join(os.path.dirname(output[0]), "measurements"),
    shell:
        "python -m experiments.steps collect {output:q} {input.run:q}"
        " --published {input.published:q} --scan {params.scan:q} > {log:q} 2>&1"


rule roofline:
    input:
        dataset=FILES.dataset,
    output:
        ceilings=FILES.ceilings,
    conda:
        "../../environment.yml"
    log:
        f"{FILES.logs}/roofline.log",
    shell:
        STEPS["roofline"].shell() + " > {log:q} 2>&1"


rule decode_knees:
    input:
        dataset=FILES.dataset,
        ceilings=FILES.ceilings,
    output:
        knees=FILES.knees,
        decode_model=FILES.decode_model,
    conda:
        "../../environment.yml"
    log:
        f"{FILES.logs}/decode_knees.log",
    shell:
        STEPS["decode"].shell() + " > {log:q} 2>&1"


rule claims:
    input:
        dataset=FILES.dataset,
        ceilings=FILES.ceilings,
        knees=FILES.knees,
        datasheets=FILES.datasheets,
    output:
        claims=FILES.claims,
    conda:
        "../../environment.yml"
    log:
        f"{FILES.logs}/claims.log",
    shell:
        STEPS["claims"].shell() + " > {log:q} 2>&1"



# Every workload call and op placed and predicted, each workload's batch knees, every call on the
# datasheet devices (the report reads all three; published with a set).
rule placements:
    input:
        dataset=FILES.dataset,
        ceilings=FILES.ceilings,
        datasheets=FILES.datasheets,
    output:
        placements=FILES.placements,
        workload_knees=FILES.workload_knees,
        datasheet_predictions=FILES.datasheet_predictions,
    conda:
        "../../environment.yml"
    log:
        f"{FILES.logs}/placements.log",
    shell:
        STEPS["placements"].shell() + " > {log:q} 2>&1"


# The report's interactive roofline (Bokeh), built beside the figures and the claims.
rule interactive:
    input:
        dataset=FILES.dataset,
        ceilings=FILES.ceilings,
        placements=FILES.placements,
        workload_knees=FILES.workload_knees,
        datasheet_predictions=FILES.datasheet_predictions,
    output:
        interactive=FILES.interactive,
    conda:
        "../../environment.yml"
    log:
        f"{FILES.logs}/interactive.log",
    shell:
        STEPS["interactive"].shell() + " > {log:q} 2>&1"


rule figures:
    input:
        dataset=FILES.dataset,
        ceilings=FILES.ceilings,
        knees=FILES.knees,
        decode_model=FILES.decode_model,
        datasheets=FILES.datasheets,
    output:
        # one SVG per figure: the HTML report inlines it, Snakemake's report shows it (a PNG
        # beside it took a 2-core VM 4 s of the figures' 11)
        [
            report(
                f"{FILES.figures}/{name}.svg",
                caption=f"../report/{name}.rst",
                category=fig.category,
            )
            for name, fig in FIGURES.items()
        ],
        index=f"{FILES.figures}/index.json",
    conda:
        "../../environment.yml"
    log:
        f"{FILES.logs}/figures.log",
    # first of the steps ready with it (claims, interactive): the longest, its figures drawn on
    # every core (on 2 cores, started after the claims it ended 2 s after the others)
    priority: 1
    params:
        figures=lambda wildcards, output: os.path.dirname(output.index),
    shell:
        STEPS["figures"].shell(figures="{params.figures:q}") + " > {log:q} 2>&1"


rule report:
    input:
        dataset=FILES.dataset,
        ceilings=FILES.ceilings,
        knees=FILES.knees,
        claims=FILES.claims,
        placements=FILES.placements,
        workload_knees=FILES.workload_knees,
        datasheet_predictions=FILES.datasheet_predictions,
        datasheets=FILES.datasheets,
        figures=expand(f"{FILES.figures}/{{name}}.svg", name=FIGURES),
        index=f"{FILES.figures}/index.json",
        interactive=FILES.interactive,
    output:
        report=report(
            FILES.report,
            caption="../report/report.rst",
            category="Report",
        ),
        summary=FILES.summary,  # what `rooflab run` prints at the end
    conda:
        "../../environment.yml"
    log:
        f"{FILES.logs}/report.log",
    params:
        figures=lambda wildcards, input: os.path.dirname(input.index),
    shell:
        STEPS["report"].shell(figures="{params.figures:q}") + " > {log:q} 2>&1"
