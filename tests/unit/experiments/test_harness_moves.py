"""What the experiments moved onto the harness read from the rows before a point, on their GPU
paths, checked here without a GPU (the CPU jobs of tests/test_<experiment>.py run the rest)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from experiments import transfer
from experiments.core.config import Settings
from experiments.core.harness import Point, Skipped, State

CTX = SimpleNamespace(settings=Settings.defaults(), dtype="float32")
PINNED = "h2d_pinned_blocking"


def _state(row, rows, **args):
    return State(CTX, None, Point(row, args=args), 0.1, rows, {})


def test_a_transfer_model_row_fits_the_transfer_rows_before_it():
    rows = [{"op": "d2d_copy", "status": "ok", "bytes": 2e9, "time_s": 1e-3}]  # 2 TB/s
    rows += [{"op": "transfer", "variant": PINNED, "status": "ok", "bytes": s,
              "time_s": 2e-6 + s / 25e9} for s in (1e6, 1e7, 1e8)]
    link = {"pcie_peak_Bps": 50e9}
    out = transfer._model(_state({"op": "transfer_model", "variant": PINNED}, rows, link=link))
    params = out["params"]
    assert params["bandwidth_Bps"] == pytest.approx(25e9) and params["points"] == 3
    assert params["ratio_to_device_bw"] == pytest.approx(25e9 / 2e12)
    assert params["ratio_to_pcie_peak"] == pytest.approx(0.5)
    lone = _state({"op": "transfer_model", "variant": "d2h_pinned_blocking"}, rows, link=link)
    with pytest.raises(Skipped, match="0 measured sizes"):
        transfer._model(lone)


def test_create_then_move_reads_its_sizes_other_create_rows(monkeypatch):
    monkeypatch.setattr(transfer, "_need_gpu", lambda ctx, reason=None: None)
    monkeypatch.setattr(transfer, "time_create", lambda ctx, op, n, budget_s: {"time_s": 4.0})
    before = [{"op": "create_on_device", "status": "ok", "time_s": 1.0},
              {"op": "create_on_host", "status": "ok", "time_s": 3.0},
              {"op": "move_to_device", "status": "oom", "time_s": None}]
    older = [{"op": "create_on_host", "status": "ok", "time_s": 99.0}]  # another size's
    row = transfer._create(_state({"op": "create_then_move", "n": 8}, older + before))
    assert row["params"] == {"ratio_to_create_on_device": 4.0, "host_randn_s": 3.0,
                             "move_s": None, "move_fraction": None}
    plain = transfer._create(_state({"op": "create_on_host", "n": 8}, older))
    assert "params" not in plain
