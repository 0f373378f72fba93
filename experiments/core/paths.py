"""Where the workflow's files are: Snakefile, config/, workflow/ and the published sets.

The repository keeps them at its top level, the one copy anyone edits. A wheel carries them
inside this package as experiments/_workflow/ (pyproject.toml maps the top level there as package
data), so an installed rooflab runs its sweep from any directory.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent  # experiments/
SHIPPED = PACKAGE / "_workflow"  # the installed copy (a wheel; absent in a checkout)


class MissingFiles(FileNotFoundError):
    """Neither a checkout nor an installed copy holds the workflow's files."""


def workflow_root() -> Path:
    """The folder holding Snakefile, config/ and workflow/: the repository checkout this package
    sits in (an editable install, or running from the checkout) first, else the copy installed
    with the package."""
    for root in (PACKAGE.parent, SHIPPED):
        if (root / "config" / "job.yaml").is_file():  # every command needs it; run the Snakefile
            return root
    raise MissingFiles(f"rooflab's workflow files (config/job.yaml, Snakefile) are neither in "
                       f"{PACKAGE.parent} (a checkout) nor in {SHIPPED} (an installed package); "
                       "reinstall rooflab")


def config_dir() -> Path:
    """config/: job.yaml, experiment/*.yaml, config.yaml, presets/, datasheets.yaml."""
    return workflow_root() / "config"


def shipped(path: str | Path, root: str | Path | None = None) -> Path:
    """A file the workflow ships, by its path in the repository (config/datasheets.yaml): the
    working directory's own file of that name if it has one, else the one under `root` (the
    running Snakefile's folder; default: workflow_root())."""
    if Path(path).exists():
        return Path(path)
    return (workflow_root() if root is None else Path(root)) / path
