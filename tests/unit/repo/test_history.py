"""History lives in git, not in code: comments, docstrings, config comments, the Snakemake rules
and README give reasons, not lab notes. No commit hashes, no stories of named machines ("the
node", "the VM"), no dates. Files are read as text, never imported. docs/benchmarks.md holds the
current measurements with their commits; git log holds the earlier ones."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# A git commit hash, 7 to 40 hex digits with at least one letter and one digit (a plain number,
# 1048576, or a word, "facade", is none). Word-bounded, so a 0x literal's digits never match.
COMMIT = r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b"
# Named machines, case-sensitive. "a VM's host" (steal) and "a NUMA node's cores" are concepts,
# not machines; \b keeps LLVM's out; a microarchitecture's name in a table ("Zen4") is no story.
MACHINES = [r"\bZen \d\b", r"\bthe node\b", r"\bthe VM\b(?!'s host)", r"\bH200 node\b",
            r"(?<!NUMA )\bnode's", r"\bVM's(?! host)", r"\bfreshly lent\b",
            r"\b(?:Intel|AMD|EPYC|Xeon|CPU-only|lent|\d+-core) (?:VM|node)s?\b",
            r"\bthis (?:VM|node|session)\b"]
# A date (2026-12, 2026-12-04, Dec 4 2026), a time of day in UTC (03:44 UTC), a day named by when.
MONTHS = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.?"
DATES = [r"\b(?:19|20)\d\d-(?:0[1-9]|1[0-2])\b", r"\b\d{1,2}:\d\d UTC\b",
         rf"\b{MONTHS} \d{{1,2}}(?:st|nd|rd|th)?,? (?:19|20)\d\d\b",
         r"\b(?:yesterday|last night|this morning)\b"]
LAB_NOTE = re.compile("|".join([COMMIT, *MACHINES, *DATES]))


def scanned(root: Path = ROOT) -> list[Path]:
    """Every file whose text is checked: experiments/' Python, config/'s YAML, the Snakefile and
    its rules, README.md."""
    return (sorted((root / "experiments").rglob("*.py")) + sorted((root / "config").rglob("*.yaml"))
            + [root / "Snakefile", *sorted((root / "workflow").rglob("*.smk")), root / "README.md"])


def hits(root: Path = ROOT) -> list[str]:
    """'path:line: what' of each lab note in the scanned files under `root`."""
    return [f"{path.relative_to(root)}:{n}: {what!r}" for path in scanned(root)
            for n, what in lab_notes(path.read_text())]


def lab_notes(text: str) -> list[tuple[int, str]]:
    """(line number, what matched) of each commit hash, named machine or date in `text`."""
    return [(n, m.group()) for n, line in enumerate(text.splitlines(), 1)
            for m in LAB_NOTE.finditer(line)]


def test_the_check_finds_lab_notes():
    assert lab_notes("x = 1\n# read 1.2 TB/s at 02b763f on the node\n") == [
        (2, "02b763f"), (2, "the node")]
    for note in ("between 426d0bf and cf9410a1", "the 2-core VM's float32", "the Zen 1 VM",
                 "the H200 node's Xeon", "a node's jobs", "this VM's CPUs", "on 2026-12-04",
                 "(2026-12, 13:45-15:15 UTC)", "read 0.09 on the VM", "the Zen 3 VM's L3",
                 "beside it took a 2-core VM 4 s", "the Intel VM read", "on a lent node",
                 "a freshly lent H100", "this session's CPU", "Dec 4, 2026", "run yesterday"):
        assert lab_notes(note), note


def test_the_check_passes_what_is_no_lab_note():
    fine = ("HALF_BITS = {0x3C00: 10}, 0x3f80abc1; sizes: [1048576, 16777216]; facade, decade; "
            "LLVM's step; other processes (or a VM's host) using > 5 %; one NUMA node's cores; "
            "sizes 2048-4096; float8_e4m3 at 1e-12; generated %Y-%m-%d %H:%M UTC; "
            'Uarch("Zen4", 2, 256); a CPU job has its node to itself; a 2-GPU node; December')
    assert lab_notes(fine) == []


def test_a_lab_note_planted_in_each_scanned_place_is_found(tmp_path):
    """The scan reaches every place it promises: a note planted in each is reported there."""
    planted = {"experiments/core/x.py": "# 1.2 TB/s at 02b763f\n",
               "experiments/y.py": '"""Read on the Zen 4 VM."""\n',
               "config/experiment/z.yaml": "sizes: [1]  # the node's DRAM\n",
               "Snakefile": "# since 2026-12-04\n", "workflow/rules/r.smk": "# a lent node\n",
               "README.md": "Times at cf9410a1.\n"}
    for name, text in planted.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert {h.split(":")[0] for h in hits(tmp_path)} == set(planted)


def test_no_lab_notes_in_code_config_or_readme():
    found = hits()
    assert not found, ("lab notes (commit hashes, named machines, dates): give the reason in "
                       "general terms; measurements belong in docs/benchmarks.md\n"
                       + "\n".join(found))
