"""The first screen: per system, the machine, the headline ceilings with their intervals, the
claims tally and what went wrong (only where something did, always with its numbers); and the
roofs of every system for the interactive roofline."""

from __future__ import annotations

import pandas as pd

from experiments import experiment_names
from experiments.analysis import claims as claims_mod
from experiments.analysis import datasheets, health, roofline
from experiments.analysis.dataset import Dataset, RUN
from experiments.analysis.silicon import SHARED
from experiments.analysis.units import count, finite, interval, memory, qty, share
from experiments.report import provenance
from experiments.report.interactive import Roofs

DTYPES = ("float64", "float32", "tf32", "float16", "bfloat16", "float8_e4m3", "float8_e5m2")
MEMORY = ("dram_bw", "l3_bw", "l2_bw", "l1_bw")
VERDICTS = (claims_mod.HOLDS, claims_mod.FAILS, claims_mod.UNDECIDED, claims_mod.NOT_MEASURABLE)


def _dtype_rank(d) -> int:
    return DTYPES.index(d) if d in DTYPES else len(DTYPES)


def headline(ceilings: pd.DataFrame) -> pd.DataFrame:
    """The fitted memory levels (DRAM first, then each cache), the FMA (vector) and GEMM (matrix)
    roofs per dtype: the ceilings a reader looks for first."""
    c = ceilings[ceilings.value.notna() & ceilings.ceiling.isin(
        MEMORY + ("vector_flops", "matrix_flops"))].copy()
    order = {k: i for i, k in enumerate(MEMORY + ("vector_flops", "matrix_flops"))}
    c["_rank"] = [(order[k], _dtype_rank(d)) for k, d in zip(c.ceiling, c.dtype)]
    return c.sort_values("_rank").drop(columns="_rank")


def name(ceiling: str, dtype) -> str:
    kind = {"vector_flops": "FMA", "matrix_flops": "GEMM"}.get(ceiling)
    if kind:
        return f"{kind} {dtype}"
    return roofline.label(ceiling).replace(" bandwidth", "")


EXPECTED = ("oom", "unsupported", "skipped")  # sizes past the memory, dtypes a device lacks


def _problems(rows: pd.DataFrame, cond: dict) -> tuple[list[str], list[str]]:
    """(what went wrong, each with its numbers: errors, wrong results, noisy, contended or
    throttled points, a CPU under load; what was expected and is only noted: sizes past the
    device's memory, dtypes it lacks, experiments with no ok row on this kind of device)."""
    bad = rows[~rows.status.isin(["ok", "not_applicable"])]
    out = [f"{len(g)} {status.replace('_', ' ')} ({', '.join(sorted(g.experiment.unique()))})"
           for status, g in bad[~bad.status.isin(EXPECTED)].groupby("status")]
    notes = [f"{len(g)} {status.replace('_', ' ')} ({', '.join(sorted(g.experiment.unique()))})"
             for status, g in bad[bad.status.isin(EXPECTED)].groupby("status")]
    for flag in ("noisy", "contended", "throttled"):
        n = int(rows[flag].fillna(False).astype(bool).sum()) if flag in rows else 0
        if n:
            out.append(f"{n} {flag} points")
    none_ok = sorted(e for e, g in rows.groupby("experiment") if not (g.status == "ok").any())
    if none_ok:  # one line for all of them: on a CPU these are most GPU experiments
        notes.append(f"no ok row in {', '.join(none_ok)}: the claims that need them are not "
                     "measurable here")
    if finite(cond.get("throttled_share")) and cond["throttled_share"] > 0:
        out.append(f"{share(cond['throttled_share'])} of points throttled (thermal, or a low "
                   "SM clock)")
    load = claims_mod.under_load(cond)
    out += [p for p in load.split("; ") if "under load" in p]
    return out, notes


def _ran_at(cond: dict) -> str:
    """The conditions the points ran under, when recorded (no zero shares)."""
    parts = []
    if finite(cond.get("median_sm_clock_mhz")):
        parts.append(f"SM clock {cond['median_sm_clock_mhz']:.0f} MHz")
    if finite(cond.get("median_power_w")):
        parts.append(f"{cond['median_power_w']:.0f} W")
    if finite(cond.get("median_cpu_freq_mhz")):
        parts.append(f"CPU {cond['median_cpu_freq_mhz']:.0f} MHz")
    if finite(cond.get("median_core_mhz")):  # where the system's is a fixed estimate (a VM)
        parts.append(f"{cond['median_core_mhz']:.0f} MHz as the cores counted")
    if finite(cond.get("median_fma_mhz")):
        parts.append(f"{cond['median_fma_mhz']:.0f} MHz as their FMA units counted")
    text = " and ".join(parts) + " (medians)" if parts else ""
    if finite(cond.get("power_capped_share")) and cond["power_capped_share"] > 0:
        text += f"; power cap on {share(cond['power_capped_share'])} of points"
    return text


def glance(ds: Dataset, ceilings: pd.DataFrame, table: pd.DataFrame, sheets,
           reference=()) -> dict:
    """Columns: the systems with a fitted ceiling or a judged claim, this run's (`systems`) apart
    from the published sets' (`references`: the systems in `reference`); `others`: systems that
    measured only workloads (placed on another system's roofline), named in one line each."""
    conds = health.system_conditions(ds.rows)
    measured = table[table.kind == claims_mod.MEASURED]
    head = headline(ceilings)
    systems, others, ref_others = [], [], []
    for s in ds.systems().itertuples():
        rows = ds.rows[ds.rows.system == s.system]
        mine = measured[measured.system == s.system]
        judged = mine[mine.verdict != claims_mod.NOT_MEASURABLE]
        if not len(head[head.system == s.system]) and not len(judged):
            kinds = sorted(rows.experiment.unique())
            (ref_others if s.system in reference else others).append(f"{s.system}: {count(len(rows), 'workload row')}, placed on the "
                          "roofline of the same device model" if kinds == ["workload"] else
                          f"{s.system}: {count(len(rows), 'row')} of {', '.join(kinds)}, "
                          "in their sections below")
            continue
        facts = ds.facts(s.system)
        cond = conds.get(s.system, {})
        sheet = datasheets.find(sheets, s.device_name)
        experiments = sorted(rows.experiment.unique())
        problems, notes = _problems(rows, cond)
        systems.append({
            "system": s.system, "machine": s.device_name, "reference": s.system in reference,
            "where": f"{s.host}, {s.device}" + (f", {memory(facts['memory_bytes'])}"
                                                if finite(facts.get("memory_bytes")) else "")
            + ("" if s.source == "run" else f"; {s.source}"),
            "sheet": sheet.name if sheet else "",
            "measured": f"{count(len(rows), 'row')} of {count(len(experiments), 'experiment')}",
            "experiments": experiments,
            # the experiments a claim reads that this system lacks (op_rates feeds the op model,
            # no claim: a system without its rows misses no claim)
            "missing": [e for e in experiment_names() if e not in set(experiments)
                        and e in claims_mod.by_experiment()],
            "took": provenance.took(ds, s.system, rows),
            "tally": {v: sorted(mine[mine.verdict == v].claim, key=_claim_rank)
                      for v in VERDICTS},
            "judged": len(mine),
            "errors": sorted(mine[mine.reason.fillna("").str.contains(
                claims_mod.ANALYSIS_ERROR, regex=False)].claim),
            "problems": problems, "notes": notes, "ran_at": _ran_at(cond)})
    mine = [s for s in systems if not s["reference"]]
    refs = [s for s in systems if s["reference"]]
    worked = table[table.kind == claims_mod.WORKED]
    return {"systems": mine, "quantities": _quantities(head, mine, sheets),
            "references": refs, "reference_quantities": _quantities(head, refs, sheets),
            "others": others, "reference_others": ref_others, "verdicts": VERDICTS,
            "worked": len(worked),
            "worked_same": int(worked.measurement.str.endswith("as the article says").sum())}


def _quantities(head: pd.DataFrame, systems: list[dict], sheets) -> list[dict]:
    """The headline ceilings' rows of the first screen's table, one cell per system."""
    names = [s["system"] for s in systems]
    quantities = []
    for (ceiling, dtype), g in head[head.system.isin(names)].groupby(
            ["ceiling", head.dtype.fillna("")], sort=False):
        cells = []
        for sys_name in names:
            c = g[g.system == sys_name]
            if not len(c):
                cells.append({"text": "", "title": ""})
                continue
            c = c.iloc[0]
            ref = _reference(c, sheets)
            text = interval(c.value, c.ci_low, c.ci_high, c.unit)
            note = silicon_note(c) if ref is None else ""  # a CPU's FMA or GEMM
            if note:
                cells.append({"text": text + (f", {silicon_share(c)}" if finite(
                    c.get("of_physical_peak")) else ""), "title": note})
                continue
            cells.append({"text": text,
                          "title": f"{share(c.value / ref)} of the datasheet's {qty(ref, c.unit)}"
                          if ref else ""})
        quantities.append({"name": name(ceiling, dtype), "cells": cells})
    return quantities


def silicon_share(c) -> str:
    """"71 % of the silicon's peak" of a CPU ceiling with one (analysis/silicon.py). Over 100 %
    the table's ports and lanes say the cores ran faster than their recorded clock (without
    APERF/MPERF, as in most VMs, /proc/cpuinfo reads a fixed estimate)."""
    of, scaling = c.get("of_physical_peak"), c.get("fma_scaling")
    return f"{share(of)} of the silicon's peak" + (
        " at the recorded clock: the cores ran faster" if finite(of) and of > 1 else "") + (
        f" (its CPUs share FMA units: {scaling:.2f}x a CPU's rate each, one alone "
        f"{share(c.get('one_cpu_of_peak'))})" if finite(scaling) and scaling < SHARED else "")


def silicon_note(c) -> str:
    """A CPU FMA or GEMM ceiling's peak and its basis, or why it has none; "" without either."""
    basis = c.get("peak_basis")
    if not isinstance(basis, str) or not basis:
        return ""
    if not finite(c.get("physical_peak")):
        return f"no silicon peak: {basis}"
    return (f"{share(c.get('of_physical_peak'))} of the silicon's peak "
            f"({qty(c['physical_peak'], c['unit'])}: {basis})")


def _claim_rank(cid: str) -> int:
    return claims_mod.CLAIM_IDS.index(cid) if cid in claims_mod.CLAIM_IDS else 99


def _reference(c, sheets) -> float | None:
    sheet = datasheets.find(sheets, c["device_name"])
    if sheet is None:
        return None
    if c["ceiling"] in ("matrix_flops", "vector_flops") and isinstance(c["dtype"], str):
        return sheet.peak("matrix" if c["ceiling"] == "matrix_flops" else "vector", c["dtype"])
    return sheet.bandwidth_Bps if c["ceiling"] == "dram_bw" else None


def roofs(ceilings: pd.DataFrame, systems: list[str], reference=()) -> list[Roofs]:
    """Each system's memory levels and its FMA and GEMM roofs, every dtype fitted, for the plot;
    the systems in `reference` (published sets) marked so."""
    out = []
    head = headline(ceilings)
    for s in systems:
        c = head[head.system == s]
        memory = [(name(r.ceiling, None), float(r.value)) for r in c.itertuples()
                  if r.ceiling in MEMORY]
        compute = [(name(r.ceiling, r.dtype), float(r.value)) for r in c.itertuples()
                   if r.ceiling in ("matrix_flops", "vector_flops")]
        if memory or compute:
            out.append(Roofs(s, memory, compute, reference=s in reference))
    return out


def reference_systems(ds: Dataset) -> set[str]:
    """The published sets' systems, which the page folds behind this run's; none when the
    dataset holds no run of its own (a published folder's report shows its own systems)."""
    systems = ds.systems()
    mine = systems.source == RUN
    return set(systems.system[~mine]) if mine.any() else set()


def beside_dram(ceilings: pd.DataFrame, c) -> str:
    """The FMA sweep's bandwidth names the DRAM ceiling it differs from (two numbers, two runs)."""
    dram = ceilings[(ceilings.system == c["system"]) & (ceilings.ceiling == "dram_bw")].value
    return (f"the FMA sweep's memory-bound side; the bandwidth experiment's DRAM: "
            f"{qty(dram.iloc[0], 'B/s')}") if c["ceiling"] == "intensity_bw" and len(dram) \
        and finite(dram.iloc[0]) else ""
