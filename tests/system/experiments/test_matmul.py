from __future__ import annotations

import json
import numpy as np


def test_sizes_past_check_max_are_timed_unchecked(run_experiment):
    rows = run_experiment("matmul", "bfloat16", ["experiment.sizes=[32,64]", "experiment.check_max=32"])
    assert list(rows.status) == ["ok", "ok"] and list(rows.check_passed) == [True, False]
    assert np.isnan(rows.rel_error.iloc[1])
    assert json.loads(rows.params.iloc[1])["input_rounding_error"] is None
