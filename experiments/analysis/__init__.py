"""Analysis: merge measurement files, fit the roofline, find the decode knees, judge the
article's claims. One module per concern:

    compute     what each aggregate step computes, in memory (experiments/steps/ writes it)
    dataset     collect / load the merged dataset; `source` labels published sets
    datasheets  reference devices from config/datasheets.yaml
    roofline    fitted ceilings with bootstrap intervals -> results/roofline/ceilings.parquet
    knees       the decode knee and tokens/s predicted from the ceilings
    placements  workloads placed on the fitted roofline, their batch knees
    prediction  the op model a placed call is predicted by (sweeps: the curves it reads)
    health      what the points ran under (load, clocks, throttling)
    claims/     C1-C20, one check each, and which experiments and figure each reads

The figures and the HTML report are experiments/report/'s; nothing here imports them (the
steps that join the two, and this package's command line, are experiments/steps/'s).
Command line: python -m experiments.steps STEP --help (collect, roofline, decode, claims,
placements, figures, report)
"""
