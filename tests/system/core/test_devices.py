"""Device names, the devices a sweep measures (pools of identical GPUs), and the lock that gives
each job a GPU of its own."""

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[3]


CLAIM = textwrap.dedent("""
    import sys, time
    from experiments.core.device import claim_device
    with claim_device("cuda:0+1", lock_dir=sys.argv[1]) as dev:
        print(dev, flush=True); time.sleep(10)  # long enough for both to claim
""")


@pytest.mark.system
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_two_jobs_on_a_pool_of_two_gpus_get_one_each(tmp_path):
    jobs = [subprocess.Popen([sys.executable, "-c", CLAIM, str(tmp_path)],
                             stdout=subprocess.PIPE, text=True) for _ in range(2)]
    got = sorted(job.communicate(timeout=120)[0].strip() for job in jobs)
    assert got == ["cuda:0", "cuda:1"]


CLAIM_CPU = textwrap.dedent("""
    import sys, time
    from experiments.core.device import claim_device
    with claim_device("cpu", lock_dir=sys.argv[1]):
        start = time.time(); time.sleep(1.0)
        print(start, time.time(), flush=True)
""")


@pytest.mark.system
def test_two_cpu_jobs_measure_one_after_the_other(tmp_path):
    # two jobs of any host label or results folder: only the lock folder (per machine) is shared
    jobs = [subprocess.Popen([sys.executable, "-c", CLAIM_CPU, str(tmp_path)],
                             stdout=subprocess.PIPE, text=True) for _ in range(2)]
    (a0, a1), (b0, b1) = sorted(tuple(map(float, job.communicate(timeout=120)[0].split()))
                                for job in jobs)
    assert all(job.returncode == 0 for job in jobs)
    assert a1 <= b0, f"the CPU was measured by both at once: {a0}-{a1} and {b0}-{b1}"
    assert (tmp_path / "CPU.lock").exists()


HOLD_MACHINE_LOCK = textwrap.dedent("""
    import sys, time
    from experiments.core.device import acquire_first_free, default_lock_dir
    folder = default_lock_dir()
    index, lock = acquire_first_free([folder / sys.argv[1]], poll_s=0.01)
    start = time.time(); time.sleep(1.0)
    print(folder, start, time.time(), flush=True)
    lock.release()
""")


@pytest.mark.system
def test_runs_with_different_tmpdirs_take_turns_on_one_lock_per_machine(tmp_path):
    """The lock folder is the machine's (/dev/shm or /tmp), not TMPDIR's: two runs with their own
    TMPDIR must not measure the CPU at once. A lock of its own name: a real run goes on."""
    name = f"test-{uuid.uuid4().hex}.lock"
    temps = [tmp_path / "a", tmp_path / "b"]
    jobs = []
    for temp in temps:
        temp.mkdir()
        jobs.append(subprocess.Popen(
            [sys.executable, "-c", HOLD_MACHINE_LOCK, name], stdout=subprocess.PIPE, text=True,
            env=os.environ | {"TMPDIR": str(temp), "PYTHONPATH": str(ROOT)}))
    outs = [job.communicate(timeout=120)[0].split() for job in jobs]
    assert all(job.returncode == 0 for job in jobs), outs
    (folder_a, a0, a1), (folder_b, b0, b1) = sorted(outs, key=lambda o: float(o[1]))
    folder = Path(folder_a)
    try:
        assert folder_a == folder_b and folder in (Path("/dev/shm/rooflab-locks"),
                                                   Path("/tmp/rooflab-locks"))
        assert float(a1) <= float(b0), f"both held the lock at once: {a0}-{a1}, {b0}-{b1}"
        # any user's run opens the folder's files, and makes its own in it
        assert folder.stat().st_mode & 0o777 == 0o777
        assert (folder / name).stat().st_mode & 0o666 == 0o666
    finally:
        for path in (folder / name, folder / f"{name}.pid"):
            path.unlink(missing_ok=True)
