"""Do repeat runs fall in each other's intervals? (issue 56)

    python bench/coverage.py [--calibrate K] RUN_DIR ...

Each RUN_DIR holds a run's measurements.parquet (bench/repeats.sh's rN folders, or a results
folder). The ceilings are fitted afresh with the code at hand (plateaus.RUN_TO_RUN included).
--calibrate K: the spread between the first K runs per device kind and kind of ceiling (B/A - 1
over every ordered pair, so its max is the largest ratio either way), to set RUN_TO_RUN from; the
coverage is then counted on the other runs only, so the floor is never judged on the runs it
came from. Prints per pair the ceilings of B outside A's interval, and the coverage; where a
run's CPU was shared (its summary's "shared CPU" line), the coverage split by which side was.
The workloads' times per call (compare.workload_calls, RUN_TO_RUN "workload") are counted apart.
"""

from __future__ import annotations

import argparse
import functools
import itertools
from pathlib import Path
from unittest import mock

import pandas as pd

from experiments.analysis import dataset, plateaus, roofline, silicon
from experiments.report import compare

KEY = ["device_kind", "ceiling", "dtype"]


@functools.cache
def _own(run: Path) -> dataset.Dataset:
    """The run's dataset, its own rows only (read once: fitted and calls both need it)."""
    ds = dataset.load(run / "measurements.parquet")
    ds.rows = ds.rows[ds.rows.source == "run"] if "source" in ds.rows else ds.rows
    return ds


def fitted(run: Path, floors: bool = True) -> pd.DataFrame:
    ds = _own(run)
    zero = {k: dict.fromkeys(v, 0.0) for k, v in plateaus.RUN_TO_RUN.items()}
    with mock.patch.dict(plateaus.RUN_TO_RUN, plateaus.RUN_TO_RUN if floors else zero):
        c = roofline.fit(ds)
    c = c[c.value.notna()]
    c = c.assign(dtype=c.dtype.fillna(""), family=c.ceiling.map(plateaus.FAMILY),
                 kind=c.device_kind.map(plateaus.floor_kind))
    return c.set_index(KEY)


def calls(run: Path) -> pd.DataFrame:
    """The run's own workload calls, each with its interval (compare.workload_calls)."""
    key = ["device"] + compare.WORKLOAD_KEY
    w = compare.workload_calls(_own(run).rows).drop_duplicates(key)
    return w.assign(kind=w.device_kind.map(plateaus.floor_kind)).set_index(["kind"] + key)


def pairs(runs: dict[str, pd.DataFrame], names: list[str]):
    for a, b in itertools.permutations(names, 2):
        both = runs[a].merge(runs[b], left_index=True, right_index=True, suffixes=("_a", "_b"))
        yield a, b, both


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--calibrate", type=int, default=0)
    args = p.parse_args()
    names = [str(r) for r in args.runs]
    k = args.calibrate
    if k:
        raw = {n: fitted(Path(n), floors=False) for n in names[:k]}
        spread = pd.concat([both.assign(dev=both.value_b / both.value_a - 1)
                            for _, _, both in pairs(raw, names[:k])])
        print("run-to-run spread of the calibration runs (B/A - 1 over every ordered pair):")
        print(spread.groupby(["kind_a", "family_a"]).dev.agg(["max", "median", "count"])
              .round(3).to_string())
        w = pd.concat([both.assign(dev=both.value_b / both.value_a - 1) for _, _, both in
                       pairs({n: calls(Path(n)) for n in names[:k]}, names[:k])])
        print("workloads:", w.groupby(level="kind").dev.agg(["max", "median", "count"])
              .round(3).to_string())
    held = names[k:]
    runs = {n: fitted(Path(n)) for n in held}
    # runs whose CPU FMA team scaled as on a shared host (the summary's "shared CPU" line)
    shared = {n for n, c in runs.items() if silicon.shared_cpus(c.reset_index())}
    inside = total = 0
    split: dict[tuple[bool, bool], list[int]] = {}
    for a, b, both in pairs(runs, held):
        ok = (both.value_b >= both.ci_low_a) & (both.value_b <= both.ci_high_a)
        inside, total = inside + int(ok.sum()), total + len(both)
        tally = split.setdefault((a in shared, b in shared), [0, 0])
        tally[0] += int(ok.sum())
        tally[1] += len(both)
        out = both[~ok]
        print(f"\n{Path(b).name} in {Path(a).name}'s intervals: {int(ok.sum())} of {len(both)}")
        for key, r in out.iterrows():
            print(f"  outside: {' '.join(str(x) for x in key if x)}: {r.value_b:.4g} not in "
                  f"[{r.ci_low_a:.4g}, {r.ci_high_a:.4g}] ({r.value_b / r.value_a:.3f}x)")
    if total:
        print(f"\ncoverage on held-out runs: {inside} of {total} = {inside / total:.1%}")
    held_calls = {n: calls(Path(n)) for n in held}
    tally = {}
    for a, b, both in pairs(held_calls, held):
        ok = (both.value_b >= both.ci_low_a) & (both.value_b <= both.ci_high_a)
        for kind, hit in ok.groupby(level="kind"):
            t = tally.setdefault(kind, [0, 0])
            t[0], t[1] = t[0] + int(hit.sum()), t[1] + len(hit)
        for key, r in both[~ok].iterrows():
            print(f"  workload outside: {Path(b).name} in {Path(a).name}'s: "
                  f"{' '.join(str(x) for x in key)}: {r.value_b / r.value_a:.3f}x")
    for kind, (hit, of) in sorted(tally.items()):
        print(f"workloads ({kind}) on held-out runs: {hit} of {of} = {hit / of:.1%}")
    if shared:
        print("shared CPU in " + ", ".join(sorted(Path(n).name for n in shared)) + ":")
        names_of = {(False, False): "both quiet", (False, True): "a shared repeat in a quiet "
                    "run's intervals", (True, False): "a quiet repeat in a shared run's",
                    (True, True): "both shared"}
        for key, (hit, of) in sorted(split.items()):
            print(f"  {names_of[key]}: {hit} of {of}")


if __name__ == "__main__":
    main()
