"""The report's figures: one module per figure, named as the figure it draws in catalog.FIGURES
(the figures' one declaration), its drawing function registered by @figure (common.py).

Every figure in catalog.FIGURES is always written, as SVG (inlined by the HTML report, shown by
Snakemake's report): when its experiments have no rows the file is a small placeholder that says
which experiment is missing, so the workflow's outputs stay fixed. Several systems (host/device)
are stacked, one row of panels each.
"""

from __future__ import annotations

import importlib
import pkgutil
import traceback
from pathlib import Path

from experiments.core.parallel import fork_map
from experiments.report.catalog import FIGURES
from experiments.report.figures.common import DRAW, Inputs, Missing, placeholder, plt, save, style

for _module in pkgutil.iter_modules(__path__):  # each module registers its figure
    importlib.import_module(f"{__name__}.{_module.name}")

from experiments.report.figures.peer_copy import copy_matrix  # noqa: E402

__all__ = ["DRAW", "Inputs", "Missing", "copy_matrix", "draw_all"]


_JOB: tuple = ()  # (inputs, folder) of draw_all's figures: forked workers inherit it


def draw_all(inp: Inputs, outdir) -> dict[str, str | None]:
    """Write every figure as SVG, each on its own CPU (0.3-1 s of matplotlib each); returns name
    -> reason it is a placeholder (or None)."""
    global _JOB
    undrawn = [name for name in FIGURES if name not in DRAW]
    if undrawn:  # a declared figure no module draws: its file would never be written
        raise LookupError(f"figures {', '.join(undrawn)} are declared in "
                          "experiments/report/catalog.py but no module in "
                          "experiments/report/figures/ registers them with @figure")
    style()
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    _JOB = (inp, outdir)
    try:
        return dict(zip(FIGURES, fork_map(_draw, FIGURES)))
    finally:
        _JOB = ()


def _draw(name: str) -> str | None:
    inp, outdir = _JOB
    try:
        fig, status = DRAW[name](inp), None
    except Missing as exc:
        fig, status = placeholder(name, str(exc)), str(exc)
    except Exception as exc:  # rows in a shape this figure does not know: say so, go on
        traceback.print_exc()
        plt.close("all")
        status = f"could not draw these rows ({type(exc).__name__}: {exc})"
        fig = placeholder(name, status)
    save(fig, outdir, name)
    plt.close(fig)
    return status
