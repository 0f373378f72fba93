"""`python -m experiments.analysis STEP ...`: the aggregate steps' command line (collect,
roofline, decode, claims, placements, figures, report). Its code lives with the steps it runs,
above analysis and report (experiments/steps/command.py: the usage); this is only its name."""

from __future__ import annotations

from experiments.sweep.forkserver import delegate

delegate("experiments.analysis")  # to the run's fork server if any (imports done there)

import sys

from experiments.steps.command import main, run  # noqa: F401,E402  (main: as it always was here)

if __name__ == "__main__":
    sys.exit(run())
