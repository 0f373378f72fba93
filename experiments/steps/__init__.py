"""The aggregate steps: the one room that joins analysis (what each step computes) and report
(the figures and the page), so that neither reaches into the other's layer.

    pipeline   the steps, each defined once: files in and out, what it does (the workflow's
               aggregate rules, `rooflab report`, `experiments.report.published` and the tests
               read it)
    command    their command line, `python -m experiments.analysis STEP ...`

Nothing heavy is imported here: the Snakefile reads pipeline while parsing.
"""
