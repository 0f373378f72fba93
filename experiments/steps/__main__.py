"""`python -m experiments.steps STEP ...`: the aggregate steps' command line (collect,
roofline, decode, claims, placements, interactive, figures, report); experiments/steps/command.py
holds its code and usage."""

from __future__ import annotations

from experiments.sweep.forkserver import delegate

delegate("experiments.steps")  # to the run's fork server if any (imports done there)

import sys

from experiments.steps.command import run  # noqa: E402  (after the fork server's hand-off)

if __name__ == "__main__":
    sys.exit(run())
