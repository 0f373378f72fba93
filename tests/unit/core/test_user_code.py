"""The job settings that bound user code (experiments/core/isolate.py); the hangs and crashes
themselves are system tests (tests/system/core/test_user_code.py)."""

from __future__ import annotations

import pytest


def test_job_settings_bound_user_code():
    from experiments.core.config import ConfigError, job_default, job_config
    from experiments.workload import WorkloadConfig

    assert job_default("call_timeout_s") == 60 and job_default("factory_timeout_s") == 120
    cfg = WorkloadConfig(workload="w", target="m:make_w", kwargs={}, batches=[1], max_call_s=1.0,
                         rotate_bytes_factor=1.0, max_copies=1, profile_batches=[],
                         ncu_batches=[])
    with pytest.raises(ConfigError, match="call_timeout_s=0"):
        job_config(cfg, device="cpu", dtype="float32", out="/tmp/x.parquet", call_timeout_s=0)
