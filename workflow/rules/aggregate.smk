# Collect every measurement file (this run's and the published sets) into one dataset, fit the
# roofline, predict and measure the decode knees, judge the claims, draw the figures, render the
# report. Each rule is one `python -m experiments.analysis`
# command; the logic lives in experiments/analysis.
import os
import sys

from experiments.report.catalog import FIGURES


# Published datasets that may be absent (not committed, not yet fetched): skip them, saying so.
# A relative path not in the working directory is looked up beside the Snakefile (shipped sets).
PUBLISHED = [str(shipped(p, ROOT)) for p in config.get("published", [])
             if shipped(p, ROOT).exists()]
for _path in sorted({p for p in config.get("published", []) if not shipped(p, ROOT).exists()}):
    print(f"rooflab: published dataset {_path} not found; skipped", file=sys.stderr)
# The reference devices: the working directory's config/datasheets.yaml, else the shipped one.
DATASHEETS = str(shipped("config/datasheets.yaml", ROOT))


# Light work on data already written: run where Snakemake runs, not as cluster jobs.
localrules:
    collect,
    roofline,
    decode_knees,
    claims,
    figures,
    placements,
    report,


rule collect:
    input:
        run=measurement_files(),
        published=PUBLISHED,
    output:
        f"{RESULTS}/measurements.parquet",
    conda:
        "../../environment.yml"
    log:
        f"{RESULTS}/logs/aggregate/collect.log",
    params:
        # every file under measurements/ is collected or listed as ignored
        scan=lambda wildcards, output: os.path.join(os.path.dirname(output[0]), "measurements"),
    shell:
        "python -m experiments.analysis collect {output:q} {input.run:q}"
        " --published {input.published:q} --scan {params.scan:q} > {log:q} 2>&1"


rule roofline:
    input:
        f"{RESULTS}/measurements.parquet",
    output:
        f"{RESULTS}/roofline/ceilings.parquet",
    conda:
        "../../environment.yml"
    log:
        f"{RESULTS}/logs/aggregate/roofline.log",
    shell:
        "python -m experiments.analysis roofline {input:q} --out {output:q} > {log:q} 2>&1"


rule decode_knees:
    input:
        data=f"{RESULTS}/measurements.parquet",
        ceilings=f"{RESULTS}/roofline/ceilings.parquet",
    output:
        knees=f"{RESULTS}/roofline/knees.parquet",
        model=f"{RESULTS}/roofline/decode_model.parquet",
    conda:
        "../../environment.yml"
    log:
        f"{RESULTS}/logs/aggregate/decode_knees.log",
    shell:
        "python -m experiments.analysis decode {input.data:q} --ceilings {input.ceilings:q}"
        " --out {output.knees:q} --points {output.model:q} > {log:q} 2>&1"


rule claims:
    input:
        data=f"{RESULTS}/measurements.parquet",
        ceilings=f"{RESULTS}/roofline/ceilings.parquet",
        knees=f"{RESULTS}/roofline/knees.parquet",
        datasheets=DATASHEETS,
    output:
        f"{RESULTS}/claims.parquet",
    conda:
        "../../environment.yml"
    log:
        f"{RESULTS}/logs/aggregate/claims.log",
    shell:
        "python -m experiments.analysis claims {input.data:q} --ceilings {input.ceilings:q}"
        " --knees {input.knees:q} --datasheets {input.datasheets:q} --out {output:q}"
        " > {log:q} 2>&1"


# Every workload call and op placed and predicted (the report reads it; published with a set).
rule placements:
    input:
        data=f"{RESULTS}/measurements.parquet",
        ceilings=f"{RESULTS}/roofline/ceilings.parquet",
    output:
        f"{RESULTS}/placements.parquet",
    conda:
        "../../environment.yml"
    log:
        f"{RESULTS}/logs/aggregate/placements.log",
    shell:
        "python -m experiments.analysis placements {input.data:q} --ceilings {input.ceilings:q}"
        " --out {output:q} > {log:q} 2>&1"


rule figures:
    input:
        data=f"{RESULTS}/measurements.parquet",
        ceilings=f"{RESULTS}/roofline/ceilings.parquet",
        knees=f"{RESULTS}/roofline/knees.parquet",
        model=f"{RESULTS}/roofline/decode_model.parquet",
        datasheets=DATASHEETS,
    output:
        [
            report(
                f"{RESULTS}/figures/{name}.png",
                caption=f"../report/{name}.rst",
                category=category,
            )
            for name, (category, *_) in FIGURES.items()
        ],
        expand(f"{RESULTS}/figures/{{name}}.svg", name=FIGURES),
        index=f"{RESULTS}/figures/index.json",
    conda:
        "../../environment.yml"
    log:
        f"{RESULTS}/logs/aggregate/figures.log",
    params:
        outdir=lambda wildcards, output: os.path.dirname(output.index),
    shell:
        "python -m experiments.analysis figures {input.data:q} --ceilings {input.ceilings:q}"
        " --knees {input.knees:q} --decode-model {input.model:q}"
        " --datasheets {input.datasheets:q} --outdir {params.outdir:q} > {log:q} 2>&1"


rule report:
    input:
        data=f"{RESULTS}/measurements.parquet",
        ceilings=f"{RESULTS}/roofline/ceilings.parquet",
        knees=f"{RESULTS}/roofline/knees.parquet",
        claims=f"{RESULTS}/claims.parquet",
        placements=f"{RESULTS}/placements.parquet",
        datasheets=DATASHEETS,
        figures=expand(f"{RESULTS}/figures/{{name}}.png", name=FIGURES),
        index=f"{RESULTS}/figures/index.json",
    output:
        report(
            f"{RESULTS}/report.html",
            caption="../report/report.rst",
            category="Report",
        ),
    conda:
        "../../environment.yml"
    log:
        f"{RESULTS}/logs/aggregate/report.log",
    params:
        figures=lambda wildcards, input: os.path.dirname(input.index),
    shell:
        "python -m experiments.analysis report {input.data:q} --ceilings {input.ceilings:q}"
        " --knees {input.knees:q} --claims {input.claims:q} --datasheets {input.datasheets:q} --figures {params.figures:q} --out {output:q}"
        " --placements {input.placements:q}"
        " > {log:q} 2>&1"
