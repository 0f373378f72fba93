"""History lives in git, not in code: comments, docstrings, config comments and README give
reasons, not lab notes. No commit hashes, no stories of named machines ("the node", "the VM"), no
dates. Files are read as text, never imported. docs/benchmarks.md keeps the measurement history."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# A git commit hash, 7 to 40 hex digits with at least one letter and one digit (a plain number,
# 1048576, or a word, "facade", is none). Word-bounded, so a 0x literal's digits never match.
COMMIT = r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b"
# Named machines, case-sensitive. "a VM's host" (steal) and "a NUMA node's cores" are concepts,
# not machines; \b keeps LLVM's out.
MACHINES = [r"\bZen [14]\b", r"\bthe node\b", r"\bthe VM\b(?!'s host)", r"\b2-core VM\b",
            r"\bH200 node\b", r"(?<!NUMA )\bnode's", r"\bVM's(?! host)"]
# A date (2026-12, 2026-12-04) or a time of day in UTC (03:44 UTC).
DATES = [r"\b(?:19|20)\d\d-(?:0[1-9]|1[0-2])\b", r"\b\d{1,2}:\d\d UTC\b"]
LAB_NOTE = re.compile("|".join([COMMIT, *MACHINES, *DATES]))


def scanned() -> list[Path]:
    """Every file whose text is checked: experiments/' Python, config/'s YAML, README.md."""
    return (sorted((ROOT / "experiments").rglob("*.py")) + sorted((ROOT / "config").rglob("*.yaml"))
            + [ROOT / "README.md"])


def lab_notes(text: str) -> list[tuple[int, str]]:
    """(line number, what matched) of each commit hash, named machine or date in `text`."""
    return [(n, m.group()) for n, line in enumerate(text.splitlines(), 1)
            for m in LAB_NOTE.finditer(line)]


def test_the_check_finds_lab_notes():
    assert lab_notes("x = 1\n# read 1.2 TB/s at 02b763f on the node\n") == [
        (2, "02b763f"), (2, "the node")]
    for note in ("between 426d0bf and cf9410a1", "the 2-core VM's float32", "the Zen 1 VM",
                 "the H200 node's Xeon", "a node's jobs", "this VM's CPUs", "on 2026-12-04",
                 "(2026-12, 13:45-15:15 UTC)", "read 0.09 on the VM"):
        assert lab_notes(note), note


def test_the_check_passes_what_is_no_lab_note():
    fine = ("HALF_BITS = {0x3C00: 10}, 0x3f80abc1; sizes: [1048576, 16777216]; facade, decade; "
            "LLVM's step; other processes (or a VM's host) using > 5 %; one NUMA node's cores; "
            "sizes 2048-4096; float8_e4m3 at 1e-12; generated %Y-%m-%d %H:%M UTC")
    assert lab_notes(fine) == []


def test_no_lab_notes_in_code_config_or_readme():
    hits = [f"{path.relative_to(ROOT)}:{n}: {what!r}" for path in scanned()
            for n, what in lab_notes(path.read_text())]
    assert not hits, ("lab notes (commit hashes, named machines, dates): give the reason in "
                      "general terms; measurements belong in docs/benchmarks.md\n"
                      + "\n".join(hits))
