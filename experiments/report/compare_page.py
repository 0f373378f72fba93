"""`rooflab compare`'s page: the machines side by side, both rooflines overlaid (interactive),
each ceiling's call (within noise / differs), and the claims that differ grouped by why."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import jinja2
import pandas as pd

from experiments.analysis.compute import place_calls
from experiments.core.store import write_text_atomic
from experiments.report import glance, interactive, provenance, workloads
from experiments.report.compare import (DIFFERS, WHY, Side, pairs,
                                         rows_csv, shown)
from experiments.analysis.units import qty
from experiments.report.render import plain

FACTS = (("memory_bytes", "memory"), ("compute_units", "compute units"), ("driver", "driver"),
         ("torch_version", "torch"), ("cuda_version", "CUDA"), ("capability", "capability"))


def machine(side: Side, system: str | None) -> dict:
    """A system's identity and versions, for the side-by-side table."""
    if system is None:
        return {"system": "(no partner)", "rows": {}}
    s = side.ds.systems().set_index("system").loc[system]
    facts = side.ds.facts(system)
    rows = side.ds.rows[side.ds.rows.system == system]
    commits = sorted({(m.get("git") or {}).get("commit", "")[:12]
                      for m in side.ds.file_metas(system)} - {""})
    out = {"device": f"{s.device_name} ({s.device})", "host": s.host,
           **{label: qty(facts[k], "B") if k.endswith("bytes") else str(facts[k])
              for k, label in FACTS if facts.get(k) not in (None, "")},
           "git commit": ", ".join(commits), "measured": provenance.span(rows.measured_at),
           "rows": f"{len(rows)} of {rows.experiment.nunique()} experiments"}
    return {"system": system, "rows": out}


def _plot(a: Side, b: Side, pair_list):
    if not interactive.available():  # the page keeps its tables without Bokeh
        return None
    systems, points = [], []
    for tag, side, names in (("A", a, [p[0] for p in pair_list]), ("B", b, [p[1] for p in pair_list])):
        names = [n for n in names if n]
        for r in glance.roofs(side.ceilings, names):
            r.name = f"{tag}: {r.name}"
            systems.append(r)
        calls, ops = place_calls(side.ds, side.ceilings)
        for p in workloads.points(calls[calls.system.isin(names)] if len(calls) else calls,
                                  ops.iloc[0:0]):
            p.group, p.text = f"{tag}: {p.group}", f"{tag}: {p.text}"
            points.append(p)
    return interactive.figure(systems, points, height=600)


def html(a: Side, b: Side, ceilings: pd.DataFrame, table: pd.DataFrame, sheets=()) -> str:
    pair_list = pairs(a, b)
    script, divs = interactive.embed({"roofline": _plot(a, b, pair_list)})
    groups = []
    for sys_a, sys_b in pair_list:
        c = ceilings[(ceilings.system_a == (sys_a or "")) & (ceilings.system_b == (sys_b or ""))]
        t = table[(table.system_a == (sys_a or "")) & (table.system_b == (sys_b or ""))]
        ma, mb = machine(a, sys_a), machine(b, sys_b)
        keys = list(dict.fromkeys(list(ma["rows"]) + list(mb["rows"])))
        differ = t[t["differ"]]
        groups.append({
            "a": sys_a or "(none)", "b": sys_b or "(none)",
            "machines": [(k, ma["rows"].get(k, ""), mb["rows"].get(k, "")) for k in keys],
            "ceilings": shown(c).to_dict("records"), "n_differ": int((c.call == DIFFERS).sum()),
            "n": len(c),
            "claims": {why: [{"claim": r["claim"], "a": r["verdict_a"], "b": r["verdict_b"],
                              "detail_a": plain(r["measurement_a"] or r["reason_a"]),
                              "detail_b": plain(r["measurement_b"] or r["reason_b"])}
                             for r in differ[differ.why == why].to_dict("records")]
                       for why in WHY},
            "same": [{"claim": r["claim"], "verdict": r["verdict_a"]}
                     for r in t[~t["differ"]].to_dict("records")]})
    from experiments.report.compare import workloads_table
    calls = [{"workload": r["workload"], "dtype": r["dtype"], "batch": f"{r['batch']:.0f}",
              "a": qty(r["time_a"], "s"), "b": qty(r["time_b"], "s"),
              "ratio": f"{r['ratio']:.2f}x"} for r in workloads_table(a, b).to_dict("records")]
    here = Path(__file__).parent
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(here), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    return env.get_template("compare.html.j2").render(
        a=_where(a.path), b=_where(b.path), groups=groups, calls=calls, plot=divs.get("roofline"),
        plot_script=script, bokeh_js=interactive.script() if divs else "",
        generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        tables_js=(here / "tables.js").read_text(), DIFFERS=DIFFERS)


def _where(path) -> str:
    """A dataset as a reader knows it: its folder and file, not the full path."""
    path = Path(str(path))
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


def write(out, a: Side, b: Side, ceilings: pd.DataFrame, table: pd.DataFrame,
          datasheets_list=()) -> list[Path]:
    """`out`.html: one page, and its CSV beside it (`out` with .csv); `out`.csv: the CSV alone.
    Returns the files written."""
    out = Path(out)
    if out.suffix not in (".html", ".csv"):
        raise ValueError(f"--out {out}: give a .html or .csv file")
    out.parent.mkdir(parents=True, exist_ok=True)
    csv = out.with_suffix(".csv")
    write_text_atomic(csv, rows_csv(ceilings, table).to_csv(index=False))
    if out.suffix == ".csv":
        return [csv]
    write_text_atomic(out, html(a, b, ceilings, table, list(datasheets_list)))
    return [out, csv]
