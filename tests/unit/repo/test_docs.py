"""The docs cannot drift silently: README stays a short user's guide, every repository path the docs
name exists, every column of the row schema is documented, and CI runs README's test command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PUBLISHED = sorted((ROOT / "results" / "published").glob("*/README.md"))
README_MAX_BYTES = 16 * 1024
TEST_COMMAND = "python3 -m pip install -e '.[test]' && python3 -m pytest -q"

# a backticked repository path: it starts at one of the repository's top-level entries
TOP = ("experiments/", "config/", "workflow/", "tests/", "docs/", "results/published/", ".ci/",
       "Snakefile", "pyproject.toml", "environment.yml")
BACKTICKED = re.compile(r"`([^`\s]+)`")
PLACEHOLDER = re.compile(r"[<>*{}|$]")  # a pattern such as config/experiment/<name>.yaml


def repository_paths(text: str) -> list[str]:
    paths = []
    for word in BACKTICKED.findall(text):
        if word.startswith(TOP) and not PLACEHOLDER.search(word):
            paths.append(word.rstrip(".,:;)"))
    return paths


def test_path_finder_sees_paths_and_skips_patterns():
    text = ("`experiments/core/timer.py`, `config/experiment/<name>.yaml`, `results/report.html`, "
            "`workflow/profiles/slurm`, `rooflab run`")
    assert repository_paths(text) == ["experiments/core/timer.py", "workflow/profiles/slurm"]


def test_readme_is_a_short_guide():
    size = README.stat().st_size
    assert size <= README_MAX_BYTES, (
        f"README.md is {size} bytes, over {README_MAX_BYTES}: move reference to docs/")


@pytest.mark.parametrize("doc", [README, *DOCS, *PUBLISHED],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_named_exists(doc):
    named = repository_paths(doc.read_text())
    missing = sorted({p for p in named if not (ROOT / p).exists()})
    assert not missing, f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"


def test_docs_are_linked_from_the_readme():
    readme = README.read_text()
    unlinked = [d.name for d in DOCS if f"`docs/{d.name}`" not in readme]
    assert DOCS and not unlinked, f"README.md does not point to {unlinked}"


def test_every_column_is_documented():
    from experiments.core.schema import COLUMNS

    schema_doc = (ROOT / "docs" / "schema.md").read_text()
    undocumented = [c for c in COLUMNS if f"`{c}`" not in schema_doc]
    assert not undocumented, f"docs/schema.md does not describe the columns {undocumented}"


def test_ci_runs_the_readme_test_command_on_everything():
    assert TEST_COMMAND in README.read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    pytest_lines = [line for line in ci.splitlines()
                    if "pytest" in line and not line.lstrip().startswith("#")]
    assert pytest_lines, ".ci/run runs no pytest"
    # the pinned run is README's command, every test; a second, unpinned run may take a subset
    assert "python -m pytest -q\n" in ci + "\n" and "-m " not in pytest_lines[0].split("pytest", 1)[1], (
        f".ci/run must run every test first, as README's command does: {pytest_lines}")


def test_layout_names_only_files_that_exist():
    """docs/layout.md names each room's files by their short names: each must be in the package."""
    files = {p.name for p in (ROOT / "experiments").rglob("*") if p.is_file()}
    named = set(re.findall(r"`([\w.]+\.(?:py|j2))`", (ROOT / "docs" / "layout.md").read_text()))
    assert named, "docs/layout.md names no module"
    missing = sorted(named - files)
    assert not missing, f"docs/layout.md names files that are not in experiments/: {missing}"
