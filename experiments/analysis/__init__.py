"""Analysis: merge measurement files, fit the roofline, check the article's claims, draw figures,
render the report. One module per concern:

    catalog     figure and claim names (light: the Snakefile imports it)
    dataset     collect / load the merged dataset; `source` labels published sets
    datasheets  reference devices from config/datasheets.yaml
    roofline    fitted ceilings with bootstrap intervals -> results/roofline/ceilings.parquet
    decode      the decode knee and tokens/s predicted from the ceilings
    claims      C1-C20, one check each
    figures     one module per figure, registered by @figure (SVG + PNG)
    report      the self-contained HTML report

Command line: python -m experiments.analysis {collect,roofline,figures,report,claims} --help
"""
