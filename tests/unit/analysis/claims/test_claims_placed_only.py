"""A system that only placed workloads (a published set of workloads, torch's modules placed)
can never be judged on the article's claims: it takes no "not measurable here" rows, while a
measured system keeps its own, with the reason."""

from __future__ import annotations

import pandas as pd

from tests import analysis_fixtures as fx
from experiments.analysis import claims, compute
from experiments.analysis.dataset import from_rows


def _placed(host: str) -> list[dict]:
    dev = fx.GPU | {"host": host}
    return [fx._row(dev, "workload", "mlp", "bfloat16", 1e-3 * b, 2e9 * b, 4e7, batch=b,
                    timer="cuda_event_graph") for b in (1, 8, 64)]


def test_a_system_of_placed_workloads_alone_takes_no_claim_rows():
    measured = [r for rows in fx.cpu_rows().values() for r in rows]
    ds = from_rows(measured + _placed("placed-only"))
    ceilings = compute.fit_ceilings(ds)
    table = claims.evaluate(ds, ceilings, [])
    rows = table[table.kind == claims.MEASURED]
    placed = [s for s in ds.systems().system if "placed-only" in s]
    assert len(placed) == 1 and len(rows)
    assert not (rows.system == placed[0]).any()
    # the CPU keeps every claim, "not measurable here" ones with their reason
    cpu = rows[rows.system != placed[0]]
    assert set(cpu.claim) == {c.id for c in claims.CLAIMS.values() if c.check is not None}
    unjudged = cpu[cpu.verdict == claims.NOT_MEASURABLE]
    assert len(unjudged) and (unjudged.reason.fillna("") != "").all()


def test_a_placed_system_keeps_a_claim_its_rows_judge():
    """C1 reads the workload rows' kernel names: where they are recorded, it is judged."""
    rows = _placed("placed-only")
    for r in rows:
        r["params"] = {"kernel_names": ["sm90_xmma_gemm_bf16"]}
    ds = from_rows(rows)
    table = claims.evaluate(ds, pd.DataFrame(columns=["system", "ceiling", "value"]), [])
    judged = table[table.kind == claims.MEASURED]
    assert list(judged.claim) == ["C1"] and judged.verdict.iloc[0] == claims.HOLDS
