"""`rooflab compare`'s page: what differs first, the machines side by side, both rooflines
overlaid (interactive), each ceiling's call, the claims that differ grouped by why, the
one-sided systems in a line each, and the workloads both measured."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import jinja2
import pandas as pd

from experiments.analysis.compute import place_calls
from experiments.analysis.units import memory, num
from experiments.core.store import write_text_atomic
from experiments.report import compare_plot, glance, interactive, provenance, workloads
from experiments.report.compare import (DIFFERS, WHY, Side, alone, both, labels, pairs, rows_csv,
                                        shared, slots, workloads_table)
from experiments.report.compare_text import (INTERVALS, RULE, differences, one_line, raw,
                                             shown, shown_calls)
from experiments.report.render import plain

FACTS = (("memory_bytes", "memory"), ("compute_units", "compute units"), ("driver", "driver"),
         ("torch_version", "torch"), ("cuda_version", "CUDA"), ("capability", "capability"))


def machine(side: Side, system: str) -> dict:
    """A system's identity and versions, for the side-by-side table."""
    s = side.ds.systems().set_index("system").loc[system]
    facts = side.ds.facts(system)
    rows = side.ds.rows[side.ds.rows.system == system]
    metas = side.ds.file_metas(system)
    commits = sorted({(m.get("git") or {}).get("commit", "")[:12] for m in metas} - {""})
    codes = sorted({m.get("code") for m in metas} - {None})  # the files that ran (provenance)
    out = {"device": f"{s.device_name} ({s.device})", "host": s.host,
           **{label: memory(facts[k]) if k == "memory_bytes" else
              num(facts[k]) if isinstance(facts[k], float) else str(facts[k])
              for k, label in FACTS if facts.get(k) not in (None, "")},
           "git commit": ", ".join(commits), **({"code": ", ".join(codes)} if codes else {}),
           "measured": provenance.span(rows.measured_at),
           "rows": f"{len(rows)} of {rows.experiment.nunique()} experiments"}
    return {"system": system, "rows": out}


def _side_plot(side: Side, names: list[str]):
    """A side's roofs and whole workload calls for the overlaid roofline."""
    roofs = glance.roofs(side.ceilings, names)
    calls, ops = place_calls(side.ds, side.ceilings)
    mine = calls[calls.system.isin(names)] if len(calls) else calls
    return roofs, workloads.points(mine, ops.iloc[0:0])


def _plot(a: Side, b: Side, label_a: str, label_b: str):
    if not interactive.available():  # the page keeps its tables without Bokeh
        return None
    paired = both(pairs(a, b))
    sides = {}
    for tag, side, label, i in (("A", a, label_a, 0), ("B", b, label_b, 1)):
        # a workload-only system's calls are plotted with its pair's (compare.slots)
        names = [p[i] for p in paired] + [s["system"] for s in alone(a, b)
                                          if s["side"] == tag and "beside" in s["why"]]
        sides[tag] = (label, *_side_plot(side, names))
    return compare_plot.figure(sides, slot=slots(a, b))


def _with_raw(cells: pd.DataFrame, numbers: list[dict]) -> list[dict]:
    """Each row's cells with its raw numbers under "v" (the template's data-v)."""
    return [r | {"v": v} for r, v in zip(cells.to_dict("records"), numbers)]


def html(a: Side, b: Side, ceilings: pd.DataFrame, table: pd.DataFrame,
         calls: pd.DataFrame) -> str:
    label_a, label_b = labels(a, b)
    script, divs = interactive.embed({"roofline": _plot(a, b, label_a, label_b)})
    groups = []
    for sys_a, sys_b in both(pairs(a, b)):
        c = ceilings[(ceilings.system_a == sys_a) & (ceilings.system_b == sys_b)]
        t = table[(table.system_a == sys_a) & (table.system_b == sys_b)]
        ma, mb = machine(a, sys_a), machine(b, sys_b)
        keys = list(dict.fromkeys(list(ma["rows"]) + list(mb["rows"])))
        differ = t[t["differ"]]
        groups.append({
            "a": sys_a, "b": sys_b,
            "machines": [(k, ma["rows"].get(k, ""), mb["rows"].get(k, "")) for k in keys],
            "ceilings": _with_raw(shown(c), raw(c)), "n_differ": int((c.call == DIFFERS).sum()),
            "n": len(c),
            "claims": {why: [{"claim": r["claim"], "a": r["verdict_a"], "b": r["verdict_b"],
                              "detail_a": plain(r["measurement_a"] or r["reason_a"]),
                              "detail_b": plain(r["measurement_b"] or r["reason_b"])}
                             for r in differ[differ.why == why].to_dict("records")]
                       for why in WHY},
            "same": [{"claim": r["claim"], "verdict": r["verdict_a"]}
                     for r in t[~t["differ"]].to_dict("records")]})
    here = Path(__file__).parent
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(here), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    return env.get_template("compare.html.j2").render(
        a=label_a, b=label_b, groups=groups, differ=differences(ceilings, table),
        alone=[one_line(s) for s in alone(a, b)], shared=shared(a, b), rule=RULE,
        intervals=INTERVALS,
        calls=_with_raw(shown_calls(calls), raw(calls, "batch")), n_calls_differ=int(
            (calls.call == DIFFERS).sum()) if len(calls) else 0,
        plot=divs.get("roofline"), plot_script=interactive.deferred(script),
        bokeh_js=interactive.packed_script() if divs else "", unpack_js=interactive.UNPACK_JS,
        generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        tables_js=(here / "tables.js").read_text(), DIFFERS=DIFFERS)


def write(out, a: Side, b: Side, ceilings: pd.DataFrame, table: pd.DataFrame,
          calls: pd.DataFrame | None = None) -> list[Path]:
    """`out`.html: one page, and its CSV beside it (`out` with .csv); `out`.csv: the CSV alone.
    Returns the files written."""
    out = Path(out)
    if out.suffix not in (".html", ".csv"):
        raise ValueError(f"--out {out}: give a .html or .csv file")
    calls = workloads_table(a, b) if calls is None else calls
    out.parent.mkdir(parents=True, exist_ok=True)
    csv = out.with_suffix(".csv")
    write_text_atomic(csv, rows_csv(ceilings, table, calls).to_csv(index=False))
    if out.suffix == ".csv":
        return [csv]
    write_text_atomic(out, html(a, b, ceilings, table, calls))
    return [out, csv]
