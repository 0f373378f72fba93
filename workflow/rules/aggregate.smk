# Collect every measurement file (this run's and the published sets) into one dataset, fit the
# roofline, predict and measure the decode knees, judge the claims, place the workloads (their
# batch knees, their predictions on the datasheet devices), build the interactive roofline, draw
# the figures, render the report.
# Each rule is one `python -m experiments.steps` command, its files and command from the
# step's one definition (experiments/steps/pipeline.py); the logic lives in experiments/analysis
# and experiments/report.
import os
import sys

from experiments.steps.pipeline import STEPS
from experiments.report.catalog import FIGURES


# Published datasets that may be absent (not committed, not yet fetched): skip them, saying so.
# A relative path not in the working directory is looked up beside the Snakefile (shipped sets).
PUBLISHED = [str(shipped(p, ROOT)) for p in config.get("published", [])
             if shipped(p, ROOT).exists()]
for _path in sorted({p for p in config.get("published", []) if not shipped(p, ROOT).exists()}):
    print(f"rooflab: published dataset {_path} not found; skipped", file=sys.stderr)

rule collect:
    input:
        run=measurement_files(),
        published=PUBLISHED,
    output:
        FILES.dataset,
    localrule: True  # light work on data already written: where Snakemake runs, not on a cluster
    conda:
        "../../environment.yml"
    log:
        f"{FILES.logs}/collect.log",
    params:
        # every file under measurements/ is collected or listed as ignored
        scan=lambda wildcards, output: os.path.join(os.path.dirname(output[0]),
                                                    layout.MEASUREMENTS),
    shell:
        "python -m experiments.steps collect {output:q} {input.run:q}"
        " --published {input.published:q} --scan {params.scan:q} > {log:q} 2>&1"


# Every step but the two whose outputs Snakemake's own report shows (figures, report): a rule
# made from the step's one definition, its files and command (experiments/steps/pipeline.py).
for _step in STEPS.values():
    if _step.name in ("figures", "report"):
        continue

    rule:
        name:
            _step.name
        input:
            **step_files(_step, "reads"),
        output:
            **step_files(_step, "writes"),
        localrule: True
        conda:
            "../../environment.yml"
        log:
            f"{FILES.logs}/{_step.name}.log",
        params:
            # the whole command now: a rule's shell is formatted when its job runs, and by then
            # this loop's variable names the last step
            command=_step.command(FILES),
        shell:
            "{params.command} > {log:q} 2>&1"


rule figures:
    input:
        **step_files(STEPS["figures"], "reads"),
    output:
        # one SVG per figure: the HTML report inlines it, Snakemake's report shows it (a PNG
        # beside each would add about a third to the figures' time)
        [
            report(
                f"{FILES.figures}/{name}.svg",
                caption=f"../report/{name}.rst",
                category=fig.category,
            )
            for name, fig in FIGURES.items()
        ],
        index=f"{FILES.figures}/{layout.FIGURE_INDEX}",
    localrule: True
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
        **step_files(STEPS["report"], "reads", without=("figures",)),
        figures=expand(f"{FILES.figures}/{{name}}.svg", name=FIGURES),
        index=f"{FILES.figures}/{layout.FIGURE_INDEX}",
    output:
        report=report(
            FILES.report,
            caption="../report/report.rst",
            category="Report",
        ),
        summary=FILES.summary,  # what `rooflab run` prints at the end
    localrule: True
    conda:
        "../../environment.yml"
    log:
        f"{FILES.logs}/report.log",
    params:
        figures=lambda wildcards, input: os.path.dirname(input.index),
    shell:
        STEPS["report"].shell(figures="{params.figures:q}") + " > {log:q} 2>&1"
