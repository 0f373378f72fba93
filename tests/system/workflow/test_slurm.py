"""The workflow on a real Slurm cluster: one node on localhost, started here, and the Slurm profile
(workflow/profiles/slurm) submitting a tiny CPU sweep to it through snakemake-executor-plugin-slurm.

Needs root, Debian's slurm-wlm and munge, and the plugin (.ci/run installs all three). Without
them the tests are skipped with the reason; in CI (ROOFLAB_REQUIRE_SLURM=1) that is a failure.
"""

from __future__ import annotations

import getpass
import importlib.util
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import wait_for

from tests.workflow_copy import copy_repo, snakemake

pytestmark = pytest.mark.system  # slow: see docs/development.md

REQUIRED = os.environ.get("ROOFLAB_REQUIRE_SLURM") == "1"
# Debian's default path. It must be this one: the plugin's job step drops SLURM_CONF from the
# environment of the srun it starts, which then reads the default.
CONF = Path("/etc/slurm/slurm.conf")
MARK = "# written by rooflab tests/system/workflow/test_slurm.py; removed when the test ends\n"
PROFILE = ["--workflow-profile", "workflow/profiles/slurm",
           # no accounting database here, so no sacct: ask squeue (MinJobAge keeps finished jobs
           # there), and from 2 s after submitting instead of 40
           "--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "2"]


def unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root: slurmd runs jobs as their owner, and slurm.conf is under /etc"
    missing = [b for b in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel")
               if shutil.which(b) is None]
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing): apt-get install slurm-wlm munge"
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        return "snakemake-executor-plugin-slurm is not installed: pip install -e '.[slurm]'"
    if CONF.exists() and not CONF.read_text().startswith(MARK):
        return f"{CONF} exists: this machine has a Slurm setup of its own, which the test would replace"
    return None


def skip_or_fail(reason: str):
    if REQUIRED:
        pytest.fail(f"ROOFLAB_REQUIRE_SLURM=1, but {reason}")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slurm_conf(state: Path) -> str:
    return MARK + f"""ClusterName=rooflabci
SlurmctldHost=localhost
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={state}/munge.socket
StateSaveLocation={state}/slurmctld
SlurmdSpoolDir={state}/slurmd
SlurmctldPidFile={state}/slurmctld.pid
SlurmdPidFile={state}/slurmd.pid
SlurmctldLogFile={state}/slurmctld.log
SlurmdLogFile={state}/slurmd.log
# No systemd or cgroups here: track a job's processes by parentage, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
# squeue answers the status checks, so finished jobs must stay listed a while.
MinJobAge=300
ReturnToService=2
# The profile asks 16 GB per job: take the node's memory from here, not from this machine.
SlurmdParameters=config_overrides
NodeName=localhost CPUs={os.cpu_count()} RealMemory=65536 State=UNKNOWN
PartitionName=ci Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


def squeue(*fields: str) -> list[list[str]]:
    out = subprocess.run(["squeue", "--states=all", "--noheader", "--format", "|".join(fields)],
                         capture_output=True, text=True, timeout=20).stdout
    return [line.split("|") for line in out.splitlines()]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """munged, slurmctld and slurmd on localhost; every one stopped by its PID at the end."""
    if reason := unavailable():
        skip_or_fail(reason)
    state = tmp_path_factory.mktemp("slurm")
    state.chmod(0o700)  # munged refuses a key in a directory others can write
    key = state / "munge.key"
    key.write_bytes(os.urandom(128))
    key.chmod(0o400)
    daemons: list[subprocess.Popen] = []

    def start(*cmd):
        log = open(state / f"{Path(cmd[0]).name}.out", "w")
        daemons.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True))

    def logs() -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}"
                         for p in sorted(state.glob("*.out")) + sorted(state.glob("*.log")))

    CONF.parent.mkdir(exist_ok=True)
    CONF.write_text(slurm_conf(state))
    try:
        start("munged", "--foreground", "--force", f"--key-file={key}",
              f"--socket={state}/munge.socket", f"--pid-file={state}/munged.pid",
              f"--log-file={state}/munged.log", f"--seed-file={state}/munged.seed")
        if wait_for(lambda: (state / "munge.socket").exists(), 15, poll_s=0.3):
            start("slurmctld", "-D")
            start("slurmd", "-D", "-N", "localhost")
        if not wait_for(lambda: subprocess.run(["sinfo", "--noheader", "--format", "%T"],
                                               capture_output=True, text=True,
                                               timeout=20).stdout.strip() == "idle", 45,
                            poll_s=0.3):
            skip_or_fail(f"the Slurm daemons did not come up:\n{logs()}")
        yield logs
    finally:
        if len(daemons) == 3:  # jobs of this private cluster still running: cancel them first
            try:
                subprocess.run(["scancel", "--user", getpass.getuser()], timeout=20)
                wait_for(lambda: not {"RUNNING", "COMPLETING"} & {s for s, in squeue("%T")}, 15,
                         poll_s=0.3)
            except subprocess.SubprocessError:
                pass  # slurmctld is gone: nothing to cancel through it
        for proc in reversed(daemons):
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        CONF.unlink(missing_ok=True)


def test_sweep_runs_on_slurm_through_the_profile(slurm, tmp_path):
    repo = copy_repo(tmp_path / "repo")
    # A label with a space and `;` goes to every job on a command line: it must stay a label.
    started = time.monotonic()
    run = snakemake(repo, *PROFILE, "--config", "host=ci node; touch pwned", timeout=170)
    took = time.monotonic() - started
    assert run.returncode == 0, f"{run.stdout[-8000:]}\n{slurm()}"
    print(f"Slurm sweep: {took:.0f} s")

    files = sorted((repo / "results" / "measurements").rglob("*.parquet"))
    assert [f.relative_to(repo / "results" / "measurements").as_posix() for f in files] == [
        "ci_node__touch_pwned/cpu/bandwidth/float32.parquet"]
    rows = pd.read_parquet(files[0])
    assert len(rows) == 2 and (rows.status == "ok").all(), rows[["op", "n", "status", "message"]]
    assert (rows.host == "ci_node__touch_pwned").all()
    assert not (repo / "pwned").exists()
    assert len(pd.read_parquet(repo / "results" / "measurements.parquet")) == 2
    assert (repo / "results" / "report.html").stat().st_size > 0

    # The measurement went through Slurm with the whole node; the aggregation rules are
    # localrules, so they ran on the submitting node and are not in the queue.
    jobs = {comment: (cpus, st) for comment, cpus, st in squeue("%k", "%C", "%T")}
    assert jobs == {next(k for k in jobs if k.startswith("rule_measure_")):
                    (str(os.cpu_count()), "COMPLETED")}, jobs


def test_profile_asks_for_one_gpu_or_a_whole_node(slurm, tmp_path):
    """What each job asks sbatch for. The node has no GPU and no partitions of these names, so
    both submissions are refused, after the plugin has logged them."""
    repo = copy_repo(tmp_path / "repo")
    targets = [f"results/measurements/ci/{d}/bandwidth/float32.parquet" for d in ("cpu", "cuda0")]
    run = snakemake(repo, *PROFILE, "--verbose", *targets, "--config", 'devices=["cpu","cuda:0"]',
                    'slurm={"partition": "gpus", "gpu_model": "h200", "cpu_partition": "cpus"}',
                    timeout=90)
    assert run.returncode != 0
    calls = {line.split("--comment rule_measure_wildcards_ci_")[1].split("_")[0]: line
             for line in run.stdout.splitlines() if line.startswith("sbatch call:")}
    assert set(calls) == {"cpu", "cuda0"}, run.stdout[-5000:]
    gpu, cpu = calls["cuda0"].split(" --wrap")[0], calls["cpu"].split(" --wrap")[0]
    assert "--gpus=h200:1" in gpu and "-p gpus" in gpu and "--exclusive" not in gpu
    assert "--exclusive" in cpu and "-p cpus" in cpu and "--gpus" not in cpu and "--mem" not in cpu
