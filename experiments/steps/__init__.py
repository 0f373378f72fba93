"""The aggregate steps: the one room that joins analysis (what each step computes) and report
(the figures and the page), so that neither reaches into the other's layer.

    pipeline   the steps, each defined once: files in and out, what it does (the workflow's
               aggregate rules, `rooflab report`, `experiments.steps.published` and the tests
               read it)
    command    their command line, `python -m experiments.steps STEP ...` (__main__)
    published  rebuild a published set's derived files and report from its measurements

Nothing heavy is imported here: the Snakefile reads pipeline while parsing.
"""
