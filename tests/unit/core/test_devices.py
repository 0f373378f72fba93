"""Device names, the devices a sweep measures (pools of identical GPUs), and the lock that gives
each job a GPU of its own."""

import subprocess
import sys
import textwrap
import time

import pytest
import torch

from experiments.core import devicenames as dn
from experiments.core.device import DeviceError, JobDevice, acquire_first_free, claim_device

H200 = "NVIDIA H200"


def no_torch():
    raise AssertionError("asked for the GPU models, which needs torch, when no pool can form")


@pytest.mark.parametrize("name", ["auto", "cpu", "cuda", "cuda:3", "cuda:0+1", "cuda:2+0+5"])
def test_valid_names(name):
    assert dn.check(name) == name


@pytest.mark.parametrize("name, message", [
    ("gpu", "not a device name"), ("cuda:0+", "not a device name"), ("cuda:+1", "not a device"),
    ("cuda:0;rm", "not a device name"), (3, "not a device name"), ("cuda:1+1", "names a GPU twice"),
])
def test_bad_names_say_what_is_allowed(name, message):
    with pytest.raises(DeviceError, match=message):
        dn.check(name)


def test_slugs_are_paths_and_resources():
    for name, slug in [("cpu", "cpu"), ("cuda:0", "cuda0"), ("cuda:0+1", "cuda0+1")]:
        assert dn.slug(name) == slug and dn.from_slug(slug) == name
    assert dn.resource("cuda0+1") == "cuda0_1" and dn.resource("cuda3").isidentifier()


def test_auto_pools_identical_gpus_or_measures_each():
    assert dn.sweep_devices("auto", "split", lambda: [H200, H200]) == ["cpu", "cuda:0+1"]
    assert dn.sweep_devices("auto", "each", lambda: [H200, H200]) == ["cpu", "cuda:0", "cuda:1"]
    assert dn.sweep_devices("auto", "split", lambda: []) == ["cpu"]


def test_a_pool_holds_one_model():
    models = lambda: ["A100", H200, "A100", H200]  # noqa: E731
    assert dn.sweep_devices("auto", "split", models) == ["cpu", "cuda:0+2", "cuda:1+3"]
    assert dn.sweep_devices(["cuda:1", "cuda:3", "cpu"], "split", models) == ["cpu", "cuda:1+3"]


def test_lists_without_a_possible_pool_do_not_import_torch():
    assert dn.sweep_devices(["cpu", "cuda:0"], "split", no_torch) == ["cpu", "cuda:0"]
    assert dn.sweep_devices(["cuda", "cuda:1"], "each", no_torch) == ["cuda:0", "cuda:1"]
    assert dn.sweep_devices(["cuda:0", "cuda"], "each", no_torch) == ["cuda:0"]  # one GPU, once
    # a pool written out is kept as written, in either mode
    assert dn.sweep_devices(["cuda:0+1"], "each", no_torch) == ["cuda:0+1"]


@pytest.mark.parametrize("setting, mode, message", [
    (["cuda:0", "cuda:5"], "split", "lists cuda:5, but this machine shows 2 GPU"),
    (["cpu", "auto"], "split", "stands alone"),
    ("auto", "both", "multi_gpu='both'; allowed: split, each"),
])
def test_bad_sweep_devices_fail_naming_the_value(setting, mode, message):
    with pytest.raises(DeviceError, match=message):
        dn.sweep_devices(setting, mode, lambda: [H200, H200])


HOLD = textwrap.dedent("""
    import sys, time
    from filelock import FileLock
    lock = FileLock(sys.argv[1]); lock.acquire()
    print("held", flush=True); time.sleep(float(sys.argv[2]))
""")


def _hold(path, seconds):
    """Another job: a process holding `path`'s lock for `seconds`."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path), str(seconds)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_job_takes_the_first_free_gpu_and_waits_when_none_is(tmp_path):
    paths = [tmp_path / "GPU-a.lock", tmp_path / "GPU-b.lock"]
    other = _hold(paths[0], 30)
    try:
        index, lock = acquire_first_free(paths)
        assert index == 1  # the held one is skipped
        # both held now: the next job waits until the other process lets go of its GPU
        other.kill()
        other.wait()
        index, second = acquire_first_free(paths, poll_s=0.01)
        assert index == 0
        lock.release()
        second.release()
    finally:
        other.kill()


def test_a_waiting_job_starts_when_a_gpu_frees(tmp_path):
    path = tmp_path / "GPU-a.lock"
    other = _hold(path, 0.5)
    t0 = time.monotonic()
    index, lock = acquire_first_free([path], poll_s=0.01)
    waited = time.monotonic() - t0
    lock.release()
    other.wait()
    assert index == 0 and 0.2 < waited < 10


def test_cpu_and_missing_gpus(monkeypatch):
    with claim_device("cpu") as dev:
        assert dev == torch.device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="cuda:0 does not exist here"):
            JobDevice.resolve("cuda:0+1")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d: ["A100", H200][d.index])
    with pytest.raises(DeviceError, match="pools different GPUs"):
        JobDevice.resolve("cuda:0+1")


def test_rows_say_which_device_ran_them(run_experiment):
    rows = run_experiment("bandwidth", "float32",
                          ["experiment.sizes=[4096]", "experiment.ops=[copy]"])
    assert (rows.device == "cpu").all() and (rows.measured_on == "cpu").all()


def test_a_job_between_gpus_waits_for_every_gpu_of_the_pool(tmp_path):
    from experiments.core.device import acquire_all

    paths = [tmp_path / "GPU-b.lock", tmp_path / "GPU-a.lock"]
    other = _hold(paths[0], 0.5)  # another job holds one GPU of the two
    t0 = time.monotonic()
    locks = acquire_all(paths, poll_s=0.01)
    waited = time.monotonic() - t0
    other.wait()
    try:
        assert len(locks) == 2 and 0.2 < waited < 10  # it waited for the held one
        # while it holds both, a one-GPU job finds none free
        from filelock import FileLock, Timeout
        for p in paths:
            with pytest.raises(Timeout):
                FileLock(p).acquire(timeout=0)
    finally:
        for lock in locks:
            lock.release()
    index, lock = acquire_first_free(paths)  # released: free again
    lock.release()


def test_claim_device_with_all_gpus_gives_the_cpu_as_a_list(tmp_path):
    with claim_device("cpu", lock_dir=tmp_path, all_gpus=True) as devs:
        assert devs == [torch.device("cpu")]
