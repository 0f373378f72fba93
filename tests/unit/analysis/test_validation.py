"""Out-of-sample validation: held-out placements judged per class and device
(experiments/analysis/validation.py), the report's band, and `rooflab validate`'s bad input."""

import pandas as pd
import pytest

from experiments.analysis import placements, validation
from experiments.cli import validate

SYS = "G @ lab"


def _table():
    calls = [{"kind": "call", "system": SYS, "workload": f"{w}-b{b}-x1", "dtype": "bfloat16",
              "batch": b, "measured_time_s": m, "predicted_time_s": 1.0}
             for w, b, m in (("linear", 1, 1.1), ("linear", 8, 0.8), ("conv2d", 2, 3.0))]
    ops = [{"kind": "op", "system": SYS, "workload": "conv2d-b2-x1", "dtype": "bfloat16",
            "batch": 2, "aten_op": "aten::convolution", "input_shapes": "[[2, 8, 4, 4], [8, 8, 3, "
            "3]]", "time_s": 2.0, "predicted_time_s": 1.0},
           {"kind": "op", "system": SYS, "workload": "linear-b1-x1", "dtype": "bfloat16",
            "batch": 1, "aten_op": "aten::addmm", "input_shapes": "[[8], [1, 8], [8, 8]]",
            "time_s": 1.5, "predicted_time_s": 1.0}]
    return pd.DataFrame(calls + ops).reindex(columns=placements.TABLE_COLUMNS)


def test_judged_rows_carry_their_class_and_error():
    judged = validation.judge(_table(), seed=42)
    calls = judged[judged.kind == "call"]
    assert sorted(calls["class"]) == ["conv2d", "linear", "linear"]
    assert calls.abs_error.round(6).tolist() == [0.1, 0.2, 2.0]
    ops = judged[judged.kind == "op"].set_index("aten_op")
    assert ops.loc["aten::convolution", "class"] == "aten::convolution/conv2d"
    assert ops.loc["aten::addmm", "class"] == "aten::addmm"  # no op-rate class: the op
    assert set(judged.seed) == {42}


def test_the_summary_gives_median_and_p90_per_class_and_all():
    s = validation.summary(validation.judge(_table(), seed=42)).set_index(["kind", "class"])
    assert s.loc[("call", "linear"), "n"] == 2
    assert s.loc[("call", "linear"), "median_abs_error"] == pytest.approx(0.15)
    assert s.loc[("call", "all"), "n"] == 3
    assert s.loc[("call", "all"), "median_abs_error"] == pytest.approx(0.2)
    assert s.loc[("call", "all"), "p90_abs_error"] == pytest.approx(0.2 + 0.8 * 1.8)
    assert s.loc[("op", "all"), "median_abs_error"] == pytest.approx(0.75)
    text = validation.text(s.reset_index())
    assert "seed 42" in text and "conv2d" in text and "15 %" in text


def test_the_band_is_the_calls_of_the_system_and_dtype():
    s = validation.summary(validation.judge(_table(), seed=42))
    assert validation.band(s, SYS, "bfloat16") == "held out: median 20 %, p90 164 % (3 calls)"
    assert validation.band(s, "G @ other", "bfloat16").startswith("held out: median 20 %")
    assert validation.band(s, SYS, "float32") == ""
    assert validation.band(s, "H @ lab", "bfloat16") == ""
    assert validation.band(None, SYS, "bfloat16") == ""


def test_validate_without_a_run_names_what_is_missing(tmp_path, capsys):
    assert validate.main(["--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "measurements.parquet" in err and "rooflab run" in err


def test_validate_refuses_a_bad_device_and_count(tmp_path, capsys):
    (tmp_path / "roofline").mkdir()
    for p in ("measurements.parquet", "roofline/ceilings.parquet"):
        (tmp_path / p).write_bytes(b"")
    assert validate.main(["--results", str(tmp_path), "--device", "tpu:0"]) == 2
    assert "--device 'tpu:0'" in capsys.readouterr().err
    assert validate.main(["--results", str(tmp_path), "--count", "0"]) == 2
    assert "validate.count=0" in capsys.readouterr().err


def test_calls_timed_contended_or_noisy_are_counted_as_disturbed():
    rows = pd.DataFrame([{"experiment": "workload", "system": SYS, "op": "conv2d-b2-x1",
                          "dtype": "bfloat16", "batch": 2, "variant": None, "contended": True,
                          "noisy": False},
                         {"experiment": "workload", "system": SYS, "op": "linear-b1-x1",
                          "dtype": "bfloat16", "batch": 1, "variant": None, "contended": False,
                          "noisy": False}])
    judged = validation.judge(_table(), seed=1, rows=rows)
    hit = judged[judged.disturbed.astype(bool)]
    assert sorted(hit.kind) == ["call", "op"] and set(hit.workload) == {"conv2d-b2-x1"}
    s = validation.summary(judged).set_index(["kind", "class"])
    assert s.loc[("call", "all"), "disturbed"] == 1 and s.loc[("call", "linear"), "disturbed"] == 0
    assert validation.judge(_table(), seed=1).disturbed.eq(False).all()


def test_held_out_rows_take_the_runs_host_label(tmp_path):
    """A run made with `--config host=node` is judged under its own label, whatever this
    machine's name; published rows' hosts do not count, and two run hosts leave it to the
    machine's."""
    path = tmp_path / "measurements.parquet"
    pd.DataFrame({"host": ["node", "node", "h200"], "source": ["run", "run", "published"]}) \
        .to_parquet(path)
    assert validate.run_host(path) == "node"
    pd.DataFrame({"host": ["a", "b"], "source": ["run", "run"]}).to_parquet(path)
    assert validate.run_host(path) == ""
