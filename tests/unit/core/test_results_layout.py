"""The results layout has one home, experiments/core/layout.py: where each aggregate step's file
lies in a results folder and in a published set's, spelled there and read everywhere else."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from experiments.core import layout
from experiments.steps.pipeline import FILE_KEYS, Files

ROOT = Path(__file__).resolve().parents[3]


def file_names() -> set[str]:
    """Every file name the layout spells, with and without its folder."""
    spelled = [*layout.AGGREGATE.values(), layout.FIGURE_INDEX,
               *layout.PUBLISHED_MEASUREMENTS.values()]
    return {n for v in spelled if "." in v for n in (v, Path(v).name)}


def spellings(root: Path) -> list[str]:
    """'path:line: name' of each layout file name spelled as a string outside layout.py: in the
    package's modules, the Snakefile and its rules."""
    names, home = file_names(), root / "experiments" / "core" / "layout.py"
    out = [f"{p.relative_to(root)}:{node.lineno}: {node.value}"
           for p in sorted((root / "experiments").rglob("*.py")) if p != home
           for node in ast.walk(ast.parse(p.read_text(), str(p)))
           if isinstance(node, ast.Constant) and node.value in names]
    quoted = re.compile(r"[\"']([^\"'{}]+)[\"']")
    rules = [root / "Snakefile", *sorted((root / "workflow").rglob("*.smk"))]
    return out + [f"{p.relative_to(root)}:{n}: {m.group(1)}"
                  for p in rules if p.is_file()
                  for n, line in enumerate(p.read_text().splitlines(), 1)
                  for m in quoted.finditer(line)
                  if any(m.group(1) == x or m.group(1).endswith("/" + x) for x in names)]


def test_every_step_file_has_its_place_in_the_layout():
    assert set(layout.AGGREGATE) == set(FILE_KEYS) - {"datasheets"}
    files = Files.under("res")
    assert (files.ceilings, files.report) == ("res/roofline/ceilings.parquet", "res/report.html")


def test_a_results_folder_and_a_published_folder_place_a_file_by_its_key(tmp_path):
    assert layout.file(tmp_path, "ceilings") == tmp_path / "roofline" / "ceilings.parquet"
    assert layout.published_file(tmp_path, "ceilings") == tmp_path / "ceilings.parquet"
    with pytest.raises(KeyError, match="'ceiling' is no aggregate file"):
        layout.file(tmp_path, "ceiling")


def test_no_module_or_rule_spells_a_file_of_the_layout():
    assert not spellings(ROOT), "\n".join(spellings(ROOT))


def test_a_spelled_file_name_is_found(tmp_path):
    (tmp_path / "experiments" / "report").mkdir(parents=True)
    (tmp_path / "experiments" / "report" / "x.py").write_text('f = "claims.parquet"\n')
    (tmp_path / "workflow" / "rules").mkdir(parents=True)
    (tmp_path / "workflow" / "rules" / "r.smk").write_text('out = "results/report.html"\n')
    assert spellings(tmp_path) == ["experiments/report/x.py:1: claims.parquet",
                                   "workflow/rules/r.smk:1: results/report.html"]
