"""The CPU's topology from sysfs, the teams placed on it and the fits per NUMA node, on a fake (the slow ones)."""

from __future__ import annotations

import os
import pytest


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to see a pinning")
def test_a_job_exported_openmp_binding_still_runs_on_all_its_cpus():
    """With OMP_PROC_BIND/OMP_PLACES exported (an HPC shell's), torch's OpenMP pins its importer
    to one CPU; rooflab's package drops them first, so a job keeps every CPU it was given."""
    import subprocess
    import sys
    env = os.environ | {"OMP_PROC_BIND": "spread", "OMP_PLACES": "cores"}
    code = ("import os{}; import torch; torch.ones(64, 64) @ torch.ones(64, 64); "
            "print(len(os.sched_getaffinity(0)))")
    run = lambda pre: subprocess.run([sys.executable, "-c", code.format(pre)], env=env,
                                     capture_output=True, text=True, check=True)
    if int(run("").stdout) != 1:
        pytest.skip("this OpenMP runtime does not pin its importer: nothing to undo")
    job = run("; import experiments")
    assert int(job.stdout) == len(os.sched_getaffinity(0))
    assert "OMP_PROC_BIND=spread OMP_PLACES=cores left out" in job.stderr
