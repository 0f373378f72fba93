"""What the aggregate steps compute, in memory. The steps (experiments/steps/pipeline.py) write
each result to a file; `rooflab compare` and the tests chain these functions without files.

    fit_ceilings   dataset -> ceilings
    decode_knees   dataset, ceilings -> decode knees, the prediction per decode row
    judge_claims   dataset, ceilings, datasheets, decode knees -> the claims table

Nothing heavy is imported at the top (the workflow's steps import this only when they run).
"""

from __future__ import annotations


def fit_ceilings(ds):
    from experiments.analysis import roofline
    return roofline.fit(ds)


def decode_knees(ds, ceilings):
    """(knees per decode curve, the prediction per decode row)."""
    from experiments.analysis import knees
    per_row, table = knees.predict(ds, ceilings)
    return table.reindex(columns=knees.KNEE_COLUMNS), per_row


def judge_claims(ds, ceilings, sheets, knees):
    from experiments.analysis import claims
    return claims.evaluate(ds, ceilings, sheets, knees)


def judged(ds, sheets):
    """roofline, decode and claims on a dataset in memory: (ceilings, knees, claims table)."""
    ceilings = fit_ceilings(ds)
    knees, _ = decode_knees(ds, ceilings)
    return ceilings, knees, judge_claims(ds, ceilings, sheets, knees)
