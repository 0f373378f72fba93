"""The whole workflow through snakemake on a tiny CPU sweep: measure, collect, fit, figures, report."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile

import pandas as pd
import pytest

from experiments.report.catalog import FIGURES
from experiments.analysis.dataset import param
from experiments.analysis.claims import ANALYSIS_ERROR, CLAIM_IDS, FAILS, HOLDS

from tests.workflow_copy import ROOT, copy_repo, snakemake

pytestmark = pytest.mark.system  # slow: see docs/development.md

TINY = {
    "bandwidth": {"dtypes": ["float32", "bfloat16"], "cpu": {"sizes": [16384, 1048576]}},
    # float16: measured where the CPU has half arithmetic, else rows `unsupported` saying why;
    # float8_e4m3: no CPU has it, so the sweep plans no job of it here (experiments.planned)
    "matmul": {"dtypes": ["float32", "float16", "float8_e4m3"],
               "cpu": {"sizes": [256, 320, 384, 448]}},
    "timing": {"dtypes": ["float32"], "cpu": {"kernel_sizes": [32]}},
    "decode": {"dtypes": ["float32"],
               "cpu": {"channels": [128], "batches": [1, 4], "d_model": 32, "heads": 2,
                       "block_batches": [1], "block_contexts": [16]}},
}


def test_tiny_sweep_end_to_end(tmp_path):
    repo = copy_repo(tmp_path / "repo", experiments=TINY)
    run = snakemake(repo, "--cores", "2", timeout=600)
    assert run.returncode == 0, run.stdout[-4000:]

    files = sorted((repo / "results" / "measurements" / "ci" / "cpu").rglob("*.parquet"))
    assert [f"{p.parent.name}/{p.stem}" for p in files] == sorted(
        f"{exp}/{dt}" for exp, spec in TINY.items() for dt in spec["dtypes"]
        if (exp, dt) != ("matmul", "float8_e4m3"))

    data = pd.read_parquet(repo / "results" / "measurements.parquet")
    assert set(data.experiment) == set(TINY)
    assert (data.host == "ci").all() and (data.device == "cpu").all()
    bw = data[data.experiment == "bandwidth"]
    assert len(bw) == 2 * 5 * 2 and (bw.status == "ok").all() and bw.check_passed.all()
    mm = data[data.experiment == "matmul"]
    assert sorted(mm.n[mm.dtype == "float32"]) == [256, 320, 384, 448]
    assert (mm.flops == 2.0 * mm.n**3).all()
    good = mm[mm.status == "ok"]
    # the arithmetic passed its check; the total error adds rounding the inputs
    assert (param(good, "arithmetic_error") < 2e-2).all() and (good.rel_error < 0.1).all()

    ceilings = pd.read_parquet(repo / "results" / "roofline" / "ceilings.parquet")
    # every dtype the sweep aimed at has its GEMM row: fitted, or "not fitted" saying how many
    # points were dropped and why (a busy machine may flag every float32 point noisy)
    for dtype in ("float32", "float16"):
        gemm = ceilings[(ceilings.ceiling == "matrix_flops") & (ceilings.dtype == dtype)]
        assert len(gemm) == 1, ceilings[["ceiling", "dtype", "value", "note"]]
        g = gemm.iloc[0]
        if g.value > 0:
            assert g.ci_low <= g.value <= g.ci_high if g.n_points >= 2 else "no interval" in g.note
        else:
            assert g.method == "not fitted" and re.search(
                r"\d+ of \d+ dropped \(\d+ \w+|left out \d+ \w+|single point", g.note), g.note
    # sizes stop at 1 MiB here: no DRAM plateau, and the ceiling row says why instead of guessing
    dram = ceilings[ceilings.ceiling == "dram_bw"]
    assert len(dram) == 1 and dram.value.isna().all() and dram.note.str.len().gt(0).all()

    for name in FIGURES:
        assert (repo / "results" / "figures" / f"{name}.svg").stat().st_size > 1000
    html = (repo / "results" / "report.html").read_text()
    assert len(re.findall(r"<figure[^>]*>\s*<svg", html)) >= len(FIGURES)  # inlined
    for claim in CLAIM_IDS:
        assert claim in html

    zipped = snakemake(repo, "--report", "results/report.zip")  # Snakemake's own report
    assert zipped.returncode == 0, zipped.stdout[-3000:]
    names = zipfile.ZipFile(repo / "results" / "report.zip").namelist()
    assert all(any(n.endswith(f"{fig}.svg") for n in names) for fig in FIGURES), names

    again = snakemake(repo, "-n", "--cores", "2")  # everything is done: nothing left to run
    assert again.returncode == 0 and "Nothing to be done" in again.stdout, again.stdout[-2000:]

    # a second machine's sweep in the same results/: one dataset keyed by host, compared
    second = snakemake(repo, "--cores", "2", "--config", "host=laptop",
                       "experiments={bandwidth: {dtypes: [float32], cpu: {sizes: [16384]}}}",
                       timeout=600)
    assert second.returncode == 0, second.stdout[-4000:]
    merged = pd.read_parquet(repo / "results" / "measurements.parquet")
    assert set(merged.host) == {"ci", "laptop"}
    assert len(merged[merged.host == "ci"]) == len(data)
    assert "laptop" in (repo / "results" / "report.html").read_text()


def test_tiny_sweep_beside_a_cpu_hog_completes_and_says_so(tmp_path):
    """A co-tenant spinning on every core for the whole run: the sweep finishes, its points are
    flagged contended, no verdict is drawn from them without saying so, and the report and the
    summary say the machine was busy."""
    # points long enough for /proc's 10 ms jiffies to tell a share of about half from none
    repo = copy_repo(tmp_path / "repo", experiments=TINY, job={"cpu": {"point_budget_s": 0.2}})
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(os.cpu_count() or 1)]
    try:
        run = snakemake(repo, "--cores", "2", timeout=900)
    finally:
        for h in hogs:
            h.kill()
            h.wait(timeout=10)
    assert run.returncode == 0, run.stdout[-4000:]
    data = pd.read_parquet(repo / "results" / "measurements.parquet")
    good = data[data.status == "ok"]
    # most points: one whose fastest sample ran clear of the hogs (its team's schedstat) stands
    assert good.contended.fillna(False).astype(bool).mean() > 0.5, good.contended.value_counts()
    claims = pd.read_parquet(repo / "results" / "claims.parquet")
    judged = claims[claims.verdict.isin([HOLDS, FAILS])]
    assert judged.under_load.all(), judged[["claim", "verdict", "measurement"]]
    assert judged.measurement.str.contains("under load").all()
    assert not claims.reason.fillna("").str.contains(ANALYSIS_ERROR, regex=False).any()
    assert "measured under load" in (repo / "results" / "report.html").read_text()
    assert "under load" in (repo / "results" / "summary.txt").read_text()


def test_default_sweep_plans_and_lints_clean(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    (repo / "config" / "config.yaml").write_text((ROOT / "config" / "config.yaml").read_text())
    plan = snakemake(repo, "-n", "--cores", "2", "--config", "devices=[cpu]")
    assert plan.returncode == 0, plan.stdout[-3000:]
    sweep = __import__("yaml").safe_load((ROOT / "config" / "config.yaml").read_text())
    # every experiment's and every workload's dtypes: one ordinary measure job each, but those
    # no CPU could measure (experiments.planned: the GPU-only experiments, matmul's tf32 and fp8)
    from experiments import planned
    jobs = sum(planned(name, "cpu", dtype) for name, spec in sweep["experiments"].items()
               for dtype in spec["dtypes"])
    jobs += sum(len(spec["dtypes"]) for spec in sweep["workloads"].values())
    assert jobs == 22  # 29 before planned()
    assert re.search(rf"measure\s+{jobs}\b", plan.stdout), plan.stdout[-3000:]
    lint = snakemake(repo, "--lint")
    assert lint.returncode == 0, lint.stdout[-3000:]


def test_identical_gpus_share_the_sweep_or_are_measured_each(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    jobs = sum(len(spec["dtypes"]) for spec in __import__("yaml").safe_load(
        (repo / "config" / "config.yaml").read_text())["experiments"].values())
    # a pool: its jobs once, each taking one unit of the pool's two-GPU resource
    pool = snakemake(repo, "-n", "--cores", "2", "--config", 'devices=["cuda:0+1"]')
    assert pool.returncode == 0, pool.stdout[-3000:]
    assert re.search(rf"measure\s+{jobs}\b", pool.stdout) and "/cuda0+1/" in pool.stdout
    each = snakemake(repo, "-n", "--cores", "2", "--config", 'devices=["cuda:0","cuda:1"]',
                     "multi_gpu=each")
    assert each.returncode == 0, each.stdout[-3000:]
    assert re.search(rf"measure\s+{2 * jobs}\b", each.stdout), each.stdout[-3000:]
    # splitting asks which GPUs are alike; GPUs this machine lacks fail before any job
    if not __import__("torch").cuda.is_available():
        split = snakemake(repo, "-n", "--cores", "2", "--config", 'devices=["cuda:0","cuda:1"]')
        assert split.returncode != 0
        assert "devices lists cuda:0, but this machine shows 0 GPU(s)" in split.stdout


def test_bad_sweep_config_fails_before_any_job(tmp_path):
    repo = copy_repo(tmp_path / "repo", experiments={"bandwidth": {"dtypes": ["float13"]}})
    run = snakemake(repo, "--cores", "2")
    assert run.returncode != 0
    assert "float13" in run.stdout and not (repo / "results" / "measurements").exists()


def _planned(run) -> dict[str, int]:
    """The job counts of a dry run's plan, by rule."""
    assert run.returncode == 0, run.stdout[-3000:]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", run.stdout, re.M)
            if m[1] != "total"}


def test_changed_or_deleted_results_rerun_exactly_what_they_touch(tmp_path):
    import yaml

    sweep = {"bandwidth": {"dtypes": ["float32", "float16"], "cpu": {"sizes": [16384], "ops": ["copy"]}},
             "timing": {"dtypes": ["float32"], "cpu": {"kernel_sizes": [32]}}}
    repo = copy_repo(tmp_path / "repo", experiments=sweep)
    run = snakemake(repo, "--cores", "2", timeout=600)
    assert run.returncode == 0, run.stdout[-4000:]
    assert _planned(snakemake(repo, "-n", "--cores", "2")) == {}  # nothing left to do
    measurements = repo / "results/measurements/ci/cpu"
    config = repo / "config/config.yaml"
    original = config.read_text()

    def plan_after(**change):
        config.write_text(yaml.safe_dump(yaml.safe_load(original) | change, sort_keys=False))
        return _planned(snakemake(repo, "-n", "--cores", "2"))

    # an experiment's sizes: that experiment's two jobs, then everything downstream of them
    plan = plan_after(experiments=sweep | {"bandwidth": sweep["bandwidth"] | {
        "cpu": {"sizes": [32768], "ops": ["copy"]}}})
    assert plan["measure"] == 2 and plan["collect"] == 1 and plan["report"] == 1, plan
    # (not `--list-changes params`: Snakemake 9.27 lists there every file with recorded params)
    summary = snakemake(repo, "--summary")
    assert summary.returncode == 0, summary.stdout[-3000:]
    # (its params, and the job's stamp file: results/.stamps, newer once they change)
    changed = set(re.findall(r"^(\S+)\t.*\t(?:params changed|updated input files)\t",
                             summary.stdout, re.M))
    assert changed == {f"results/measurements/ci/cpu/bandwidth/{d}.parquet"
                       for d in ("float32", "float16")}, summary.stdout[-3000:]
    # the job's point budget: every job of that device kind
    assert plan_after(job={"cpu": {"point_budget_s": 0.03}})["measure"] == 3
    # a value no job reads (Slurm's partition): nothing
    assert plan_after(slurm={"partition": "gpu"}) == {}
    config.write_text(original)
    assert _planned(snakemake(repo, "-n", "--cores", "2")) == {}

    # a deleted job file: that job, then the aggregation
    (measurements / "bandwidth/float16.parquet").unlink()
    plan = _planned(snakemake(repo, "-n", "--cores", "2"))
    assert plan["measure"] == 1 and plan["collect"] == 1 and plan["report"] == 1, plan
    assert "dtype=float16" in snakemake(repo, "-n", "-p", "--cores", "2").stdout
    rerun = snakemake(repo, "--cores", "2", timeout=600)
    assert rerun.returncode == 0 and (measurements / "bandwidth/float16.parquet").exists()
    # a deleted dataset: collect and what reads it, no measurement
    (repo / "results/measurements.parquet").unlink()
    plan = _planned(snakemake(repo, "-n", "--cores", "2"))
    assert "measure" not in plan and plan["collect"] == 1 and plan["roofline"] == 1, plan


def test_jobs_between_gpus_take_the_whole_pool(tmp_path):
    """On a pool of two GPUs (faked: a dry run needs none), peer_copy and collectives ask for the
    pool's whole resource (two units per GPU: one measuring job and the next starting) and, on
    Slurm, both GPUs; any other job for one unit."""
    sweep = {"bandwidth": {"dtypes": ["float32"], "cpu": {"sizes": [16384]}},
             "peer_copy": {"dtypes": ["float32"]}, "collectives": {"dtypes": ["float32"]}}
    repo = copy_repo(tmp_path / "repo", experiments=sweep)
    plan = snakemake(repo, "-n", "--cores", "2", "--config", 'devices=["cuda:0+1"]')
    assert plan.returncode == 0, plan.stdout[-3000:]
    jobs = re.findall(r"output: \S+/cuda0\+1/(\w+)/float32\.parquet.*?resources: ([^\n]+)",
                      plan.stdout, re.S)
    asked = {exp: dict(kv.split("=", 1) for kv in res.split(", ")) for exp, res in jobs}
    assert set(asked) == set(sweep), plan.stdout[-3000:]
    for exp in ("peer_copy", "collectives"):
        assert asked[exp]["cuda0_1"] == "4" and asked[exp]["gpu"] == "2", asked[exp]
    assert asked["bandwidth"]["cuda0_1"] == "1" and asked["bandwidth"]["gpu"] == "1"


def test_cpu_and_gpu_jobs_overlap_on_cores_of_their_own(tmp_path):
    """16 cores and one GPU: the CPU job gets 14 of them, pinned to 2-15, and the GPU jobs (the
    measuring one and the next, starting) cores 0-1, so they run side by side; on 2 cores (or
    overlap off) the CPU job takes every core."""
    repo = copy_repo(tmp_path / "repo")

    def plan(cores, *config):
        run = snakemake(repo, "-n", "-p", "--cores", str(cores), "--config",
                        'devices=["cpu","cuda:0"]', *config)
        assert run.returncode == 0, run.stdout[-3000:]
        return run.stdout

    wide = plan(16)
    assert re.search(r"device=cpu .*cpus=2-15", wide) and re.search(r"device=cuda:0 .*cpus=0-1", wide)
    assert re.search(r"threads: 14", wide)
    narrow = plan(2)
    assert "cpus=all" in narrow and "cpus=2-" not in narrow and re.search(r"threads: 2", narrow)
    off = plan(16, "cpu_gpu_overlap=false")
    assert "cpus=all" in off and re.search(r"threads: 16", off)
