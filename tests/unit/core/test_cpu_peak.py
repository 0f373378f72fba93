"""The silicon's vector peak of a CPU (core/cpu_peak.py): the microarchitecture table read from
cpuinfo, the arithmetic, the clock it takes (core/cpu_time.py), and the ceilings' columns
(analysis/silicon.py) on a real 2-core Zen 4 VM run (tests/data/cpu_run.parquet)."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from experiments.core import cpu_peak
from experiments.core.cpu_peak import cpu_identity, microarchitecture, peak
from experiments.core.cpu_time import cpu_clock, cpuinfo_mhz
from experiments.report import glance
from experiments.steps import pipeline

RUN = Path(__file__).resolve().parents[2] / "data" / "cpu_run.parquet"


def cpuinfo(family, model, name, flags, vendor="AuthenticAMD", cpus=1, mhz=(2596.148,)):
    """/proc/cpuinfo's text of `cpus` CPUs (the i-th at mhz[i])."""
    return "\n\n".join(
        f"processor\t: {i}\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
        f"model name\t: {name}\nstepping\t: 1\ncpu MHz\t\t: {mhz[i % len(mhz)]}\n"
        f"flags\t\t: fpu sse2 {flags}" for i in range(cpus)) + "\n"


AVX2 = "avx fma avx2 f16c"
ZEN4 = f"{AVX2} avx512f avx512_bf16 hypervisor"
CPUS = {
    "zen1": (23, 1, "AMD EPYC 7551 32-Core Processor", AVX2, "AuthenticAMD"),
    "zen4": (25, 17, "AMD EPYC", ZEN4, "AuthenticAMD"),  # the VM of tests/data/cpu_run.parquet
    "spr": (6, 143, "Intel(R) Xeon(R) Platinum 8480+",
            f"{AVX2} avx512f avx512_fp16 avx512_bf16 amx_tile amx_bf16 aperfmperf", "GenuineIntel"),
    "raptor": (6, 183, "13th Gen Intel(R) Core(TM) i9-13900K", AVX2, "GenuineIntel"),
    # a Xeon VM whose model number is Rocket Lake's, beside AMX and avx512_fp16 flags
    "masked": (6, 167, "Intel(R) Xeon(R) Processor",
               f"{AVX2} avx512f avx512_fp16 avx512_bf16 amx_tile amx_bf16 hypervisor",
               "GenuineIntel"),
}


def identity(tmp_path, key, **changes) -> dict:
    family, model, name, flags, vendor = CPUS[key]
    path = tmp_path / f"{key}.cpuinfo"
    path.write_text(cpuinfo(family, model, changes.get("name", name),
                            changes.get("flags", flags), vendor))
    return cpu_identity(path)


def test_the_table_names_the_microarchitecture_from_cpuinfo(tmp_path):
    assert microarchitecture(identity(tmp_path, "zen1"))[1] == "Zen1"
    assert microarchitecture(identity(tmp_path, "zen4"))[1] == "Zen4"
    assert microarchitecture(identity(tmp_path, "spr"))[1] == "Sapphire Rapids"
    uarch, why = microarchitecture(identity(tmp_path, "raptor"))
    assert uarch is None and why == "unknown microarchitecture: GenuineIntel family 0x6 model 0xb7"
    zen4 = identity(tmp_path, "zen4")
    assert zen4["family"] == 25 and zen4["model"] == 17 and "fpu" not in zen4["flags"]
    assert {"avx512f", "avx512_bf16", "hypervisor"} <= set(zen4["flags"])
    assert cpu_identity(tmp_path / "missing") is None


def test_amx_names_the_fma_units_where_a_vm_masks_the_model(tmp_path):
    masked = identity(tmp_path, "masked")
    uarch, name = microarchitecture(masked)
    assert (uarch.ports, uarch.bits) == (2, 512)
    assert name.startswith("Xeon with AMX") and "model 0xa7 not in the table" in name
    assert peak(masked, 2, 3600, "float32").flops == pytest.approx(2 * 2 * 16 * 2 * 3.6e9)
    assert "2 FMA ports x 16 float32 lanes" in peak(masked, 2, 3600, "float32").basis
    # without the AMX flag the same model number names nothing
    bare = identity(tmp_path, "masked", flags=f"{AVX2} avx512f avx512_fp16 hypervisor")
    assert microarchitecture(bare)[0] is None
    assert math.isnan(peak(bare, 2, 3600, "float32").flops)


def test_every_zen_model_range_is_linux_s():
    """Family 0x19 models 0x60-0xaf are Zen4 (Linux's amd.c), 0x20-0x5f Zen3."""
    def name(family, model):
        return microarchitecture({"vendor": "AuthenticAMD", "family": family,
                                  "model": model})[1]
    assert [name(0x19, m) for m in (0x01, 0x21, 0x44, 0x11, 0x61, 0x74, 0xA0)] == [
        "Zen3", "Zen3", "Zen3", "Zen4", "Zen4", "Zen4", "Zen4"]
    assert [name(0x17, m) for m in (0x01, 0x08, 0x18, 0x31, 0x71, 0xA0)] == [
        "Zen1", "Zen1", "Zen1", "Zen2", "Zen2", "Zen2"]
    assert name(0x1A, 0x02) == "Zen5" and name(0x1A, 0x24) == "Zen5 mobile"
    assert name(0x1A, 0x70).startswith("unknown microarchitecture")


def test_the_peak_is_cores_ports_lanes_two_and_the_clock(tmp_path):
    zen4, zen1, spr = (identity(tmp_path, k) for k in ("zen4", "zen1", "spr"))
    # Zen4: 2 FMA pipes of 256 bits (a 512-bit FMA takes two passes): 8 float32 lanes each
    assert peak(zen4, 2, 3000, "float32").flops == pytest.approx(2 * 2 * 8 * 2 * 3.0e9)
    assert peak(zen4, 2, 3000, "float32").flops == pytest.approx(192e9)
    assert peak(zen4, 2, 3000, "float64").flops == pytest.approx(96e9)
    assert peak(zen4, 2, 1500, "float32").flops == pytest.approx(96e9)  # half the clock
    # Zen1: 2 pipes of 128 bits, whatever AVX2's 256-bit instructions say
    assert peak(zen1, 2, 3000, "float32").flops == pytest.approx(2 * 2 * 4 * 2 * 3.0e9)
    # Sapphire Rapids: 2 ports of 512 bits, and native float16 FMA (avx512_fp16)
    assert peak(spr, 1, 2000, "float32").flops == pytest.approx(2 * 16 * 2 * 2.0e9)
    assert peak(spr, 1, 2000, "float16").flops == pytest.approx(2 * 32 * 2 * 2.0e9)
    basis = peak(zen4, 2, 3000, "float32").basis
    assert basis.startswith("2 cores x 2 FMA ports x 8 float32 lanes x 2 x 3.00 GHz (Zen4")


def test_no_peak_without_the_table_the_isa_or_the_clock(tmp_path):
    zen4, spr, raptor = (identity(tmp_path, k) for k in ("zen4", "spr", "raptor"))
    cases = {"avx512_fp16": peak(zen4, 2, 3000, "float16"),
             "dot product": peak(zen4, 2, 3000, "bfloat16"),
             "AMX": peak(spr, 1, 2000, "bfloat16", matrix=True),
             "unknown microarchitecture": peak(raptor, 8, 3000, "float32"),
             "no clock": peak(zen4, 2, math.nan, "float32")}
    for why, p in cases.items():
        assert math.isnan(p.flops) and why in p.basis, (why, p)
    # a VM that hides AVX-512 leaves 256-bit FMAs on 512-bit ports
    hidden = identity(tmp_path, "spr", flags=AVX2)
    assert peak(hidden, 1, 2000, "float32").flops == pytest.approx(2 * 8 * 2 * 2.0e9)


def test_skylake_sp_ports_come_from_the_part_name():
    def cpu(name):
        return {"vendor": "GenuineIntel", "family": 6, "model": 0x55, "model_name": name,
                "flags": ["avx", "fma", "avx2", "avx512f"]}
    assert peak(cpu("Intel(R) Xeon(R) Gold 6248 CPU"), 1, 2000, "float64").flops == \
        pytest.approx(2 * 8 * 2 * 2.0e9)
    assert peak(cpu("Intel(R) Xeon(R) Silver 4216 CPU"), 1, 2000, "float64").flops == \
        pytest.approx(1 * 8 * 2 * 2.0e9)
    gold5 = peak(cpu("Intel(R) Xeon(R) Gold 5218 CPU"), 1, 2000, "float64")
    assert math.isnan(gold5.flops) and "does not say which" in gold5.basis
    assert cpu_peak.by_part(cpu_peak.TABLE[0][3], "") == 2


def test_the_clock_is_read_on_the_job_s_cpus_and_says_from_where(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(cpuinfo(25, 17, "AMD EPYC", ZEN4, cpus=4, mhz=(1000.0, 2000.0, 3000.0, 4000.0)))
    assert cpuinfo_mhz({1, 2}, info) == [2000.0, 3000.0]
    root = tmp_path / "sys"
    assert cpu_clock({1, 2}, root=str(root), cpuinfo=str(info)) == (2500.0, "cpuinfo")
    for cpu, khz in ((1, 3_600_000), (2, 3_400_000)):
        (root / f"cpu{cpu}" / "cpufreq").mkdir(parents=True)
        (root / f"cpu{cpu}" / "cpufreq" / "scaling_cur_freq").write_text(f"{khz - 100_000}\n")
        (root / f"cpu{cpu}" / "cpufreq" / "cpuinfo_avg_freq").write_text(f"{khz}\n")
    assert cpu_clock({1, 2}, root=str(root), cpuinfo=str(info)) == (3500.0, "cpuinfo_avg_freq")


def run_file(tmp: Path, clock: float = 1.0, cpu: dict | None = None,
             core_mhz: float | None = None, fma_mhz: float | None = None,
             one_cpu: float | None = None) -> Path:
    """tests/data/cpu_run.parquet with its files' device facts given `cpu` (what a run records
    since the peak exists), its clocks scaled by `clock` and, given `core_mhz` (and
    `fma_mhz`), its FMA and GEMM points carrying the clock the cores (and their FMA units)
    counted after each (kernels/cpu_clock.py). `one_cpu`: each dtype's last FMA point again on
    one CPU, at this times the team's rate over its cores (intensity.py's one-CPU point)."""
    table = pq.read_table(RUN)
    meta = json.loads(table.schema.metadata[b"rooflab"])
    for source in meta["sources"].values():
        if cpu is not None:
            source["device_facts"]["extra"]["cpu"] = cpu
    frame = table.to_pandas()
    frame["cpu_freq_mhz"] *= clock
    if one_cpu is not None:
        fma = frame[frame.experiment == "intensity"].groupby("dtype").tail(1).copy()
        cores = fma.params.map(lambda p: json.loads(p)["cores"])
        slower = cores * one_cpu  # the one CPU's time over the team's, same work
        for col in [c for c in frame.columns if c.startswith("time_s") and c != "time_s_std"]:
            fma[col] *= slower
        fma["flop_per_s"] /= slower
        fma["params"] = fma.params.map(lambda p: json.dumps(json.loads(p) | {
            "scope": "one_cpu", "cores": 1, "threads": 1, "cpus": "0"}))
        frame = pd.concat([frame, fma], ignore_index=True)
    if core_mhz is not None:
        for experiment, less in (("intensity", 0), ("matmul", 100)):
            mine = frame.experiment == experiment  # a little slower after a GEMM
            clocks = {"core_mhz": core_mhz - less} | (
                {"fma_mhz": fma_mhz - less} if fma_mhz else {})
            frame.loc[mine, "params"] = [
                json.dumps((json.loads(p) if isinstance(p, str) else {}) | clocks)
                for p in frame.params[mine]]
    out = pa.Table.from_pandas(frame, schema=table.schema, preserve_index=False)
    out = out.replace_schema_metadata({**table.schema.metadata,
                                       b"rooflab": json.dumps(meta).encode()})
    path = tmp / "in" / "run.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(out, path)
    return path


def ceilings(tmp: Path, **kw) -> pd.DataFrame:
    """The roofline step's ceilings of the run file, by the workflow's steps."""
    results = tmp / "results"
    files = pipeline.Files.under(results)
    (results / "roofline").mkdir(parents=True, exist_ok=True)
    pipeline.collect([str(run_file(tmp, **kw))], out=files.dataset)
    pipeline.run("roofline", files)
    c = pd.read_parquet(files.ceilings)
    return c.set_index(["ceiling", c.dtype.fillna("")])


ZEN4_VM = {"vendor": "AuthenticAMD", "family": 25, "model": 17, "model_name": "AMD EPYC",
           "flags": ["avx", "avx2", "avx512_bf16", "avx512f", "f16c", "fma", "hypervisor"],
           "clock_source": "cpuinfo"}


def test_the_ceilings_carry_the_silicon_s_peak_at_their_points_clock(tmp_path):
    c = ceilings(tmp_path / "a", cpu=ZEN4_VM)
    fma32, fma64 = c.loc[("vector_flops", "float32")], c.loc[("vector_flops", "float64")]
    mhz = 2596.148  # the VM's cpuinfo, every point's
    assert fma32.cpu_freq_mhz == pytest.approx(mhz)
    assert fma32.physical_peak == pytest.approx(2 * 2 * 8 * 2 * mhz * 1e6)  # 166 GFLOP/s
    assert fma64.physical_peak == pytest.approx(2 * 2 * 4 * 2 * mhz * 1e6)
    assert fma32.of_physical_peak == pytest.approx(fma32.value / fma32.physical_peak)
    assert fma32.peak_basis.startswith("2 cores x 2 FMA ports x 8 float32 lanes x 2 x 2.60 GHz")
    # the VM's cpuinfo reads a fixed estimate: the ceiling passes the peak at that clock
    assert fma32.of_physical_peak > 1 and "not the cores' counted cycles" in fma32.peak_basis
    gemm = c.loc[("matrix_flops", "float32")]
    assert gemm.physical_peak == pytest.approx(fma32.physical_peak)
    bf16 = c.loc[("matrix_flops", "bfloat16")]
    assert bf16.value > 0 and math.isnan(bf16.physical_peak) and "VDPBF16PS" in bf16.peak_basis
    assert pd.isna(c.loc[("dram_bw", "")].peak_basis)
    # a repeat on a slower clock gets a lower peak, and the same ceiling a higher fraction
    slow = ceilings(tmp_path / "b", cpu=ZEN4_VM, clock=0.5).loc[("vector_flops", "float32")]
    assert slow.physical_peak == pytest.approx(fma32.physical_peak / 2)
    assert slow.of_physical_peak == pytest.approx(2 * fma32.of_physical_peak)


def test_cpus_sharing_fma_units_are_named_beside_the_peak(tmp_path):
    base = ceilings(tmp_path / "a", cpu=ZEN4_VM).loc[("vector_flops", "float32")]
    # two CPUs at 0.4x twice one CPU's rate: the one CPU is faster than the team's best point,
    # and still never the team's ceiling
    shared = ceilings(tmp_path / "b", cpu=ZEN4_VM, one_cpu=0.4).loc[("vector_flops", "float32")]
    assert shared.value == pytest.approx(base.value)
    one = shared.one_cpu_of_peak * shared.physical_peak / 2  # one core's peak: half the two's
    assert one > shared.value
    assert shared.fma_scaling == pytest.approx(0.4)  # the team's best point is its last
    assert "share FMA units" in shared.peak_basis and "one CPU alone" in shared.peak_basis
    assert "share FMA units" in glance.silicon_share(shared)
    # the same team at 0.95x: its own cores; the one CPU is still set beside the peak
    apart = ceilings(tmp_path / "c", cpu=ZEN4_VM, one_cpu=0.95).loc[("vector_flops", "float32")]
    assert apart.fma_scaling == pytest.approx(0.95)
    assert "share FMA units" not in apart.peak_basis and "one CPU alone" in apart.peak_basis
    assert "share" not in glance.silicon_share(apart)
    # the one CPU past one core's peak at its clock (cpuinfo's fixed estimate here): the basis
    # says how fast it ran at least; at twice the clock it is below the peak and says nothing
    assert shared.one_cpu_of_peak > 1 and "so it ran at" in shared.peak_basis
    fast = ceilings(tmp_path / "e", cpu=ZEN4_VM, clock=2.0, one_cpu=0.95).loc[
        ("vector_flops", "float32")]
    assert fast.one_cpu_of_peak < 1 and "so it ran at" not in fast.peak_basis
    # a GEMM ceiling has no one-CPU point
    assert math.isnan(ceilings(tmp_path / "d", cpu=ZEN4_VM, one_cpu=0.4).loc[
        ("matrix_flops", "float32")].fma_scaling)


def test_a_shared_host_s_intervals_widen_by_its_fma_scaling(tmp_path):
    """Another tenant took 0.6 of the team's cores in this run and may take none in the next:
    every CPU ceiling's interval widens 1/0.6 each way; a team on its own cores keeps its
    interval."""
    def table(path, one_cpu):
        return ceilings(path, cpu=ZEN4_VM, one_cpu=one_cpu)

    apart, shared = table(tmp_path / "a", 0.95), table(tmp_path / "b", 0.6)
    for key in (("vector_flops", "float32"), ("matrix_flops", "float32"), ("dram_bw", "")):
        a, b = apart.loc[key], shared.loc[key]
        assert b.value == pytest.approx(a.value)
        assert b.ci_low == pytest.approx(a.ci_low * 0.6)
        assert b.ci_high == pytest.approx(a.ci_high / 0.6)
        assert "another tenant shares these cores" in b.note
        assert "another tenant" not in str(a.note)
    # and the summary says so first, as of a shared GPU; a team on its own cores: nothing
    from experiments.analysis.silicon import shared_cpus
    from experiments.report import summary
    flat = lambda table: table.reset_index(level=1, drop=True).reset_index()
    said = summary.text(flat(shared), pd.DataFrame(
        columns=["claim", "system", "kind", "verdict"]), None).splitlines()
    assert said[0].startswith("shared CPU: AMD EPYC (cpu @ ") and "at 0.60x its CPUs alone" in \
        said[0] and said[0].endswith("widened 1.67x each way") and said[1] == ""
    assert shared_cpus(flat(apart)) == []


def test_compare_names_the_side_whose_cpu_was_shared(tmp_path):
    """A quiet run against one whose host had a neighbour: compare says first which side's CPU
    was shared, so its CPU differences are read as that tenant's, not the machine's."""
    from experiments.report import compare, compare_text

    ceilings(tmp_path / "quiet", cpu=ZEN4_VM, one_cpu=0.95)
    ceilings(tmp_path / "busy", cpu=ZEN4_VM, one_cpu=0.6)
    sheets = str(Path(compare.__file__).parents[2] / "config" / "datasheets.yaml")
    a, b, c, t = compare.compare(tmp_path / "quiet" / "results", tmp_path / "busy" / "results",
                                 sheets)
    lines = compare_text.text(a, b, c, t).splitlines()
    assert lines[2].startswith("B: shared CPU: AMD EPYC (cpu @ ") and "0.60x" in lines[2]
    assert not any(line.startswith("A: shared") for line in lines)
    assert compare.shared(a, a) == []


def test_files_without_a_cpu_identity_get_no_peak(tmp_path):
    c = ceilings(tmp_path)
    fma = c.loc[("vector_flops", "float32")]
    assert fma.value > 0 and math.isnan(fma.physical_peak) and pd.isna(fma.peak_basis)


def test_the_clock_is_the_cores_own_only_where_they_count_cycles():
    from experiments.analysis.silicon import counted

    assert counted({"clock_source": "cpuinfo", "flags": ["aperfmperf"]})
    assert counted({"clock_source": "cpuinfo_avg_freq", "flags": []})
    assert not counted({"clock_source": "cpuinfo", "flags": ["hypervisor"]})  # a VM's estimate
    assert not counted({"clock_source": "scaling_cur_freq", "flags": []})
    assert not counted({"clock_source": None, "flags": ["aperfmperf"]})


def test_without_counted_cycles_the_fma_peak_reads_the_clock_the_cores_counted(tmp_path):
    c = ceilings(tmp_path / "a", cpu=ZEN4_VM, core_mhz=3700.0)
    fma32 = c.loc[("vector_flops", "float32")]
    assert fma32.cpu_freq_mhz == pytest.approx(3700.0)
    assert fma32.physical_peak == pytest.approx(2 * 2 * 8 * 2 * 3700e6)  # 237 GFLOP/s
    assert "counted by the cores" in fma32.peak_basis and "3.70 GHz" in fma32.peak_basis
    # the GEMM's peak reads its own points' count
    gemm = c.loc[("matrix_flops", "float32")]
    assert gemm.cpu_freq_mhz == pytest.approx(3600.0) and "counted by the cores" in gemm.peak_basis
    assert gemm.physical_peak == pytest.approx(2 * 2 * 8 * 2 * 3600e6)
    # where the kernel counts cycles (APERF/MPERF), that clock stands
    counted = ceilings(tmp_path / "b", cpu=ZEN4_VM | {"flags": [*ZEN4_VM["flags"], "aperfmperf"]},
                       core_mhz=3700.0).loc[("vector_flops", "float32")]
    assert counted.cpu_freq_mhz == pytest.approx(2596.148)


def test_the_fma_units_clock_comes_before_the_scalar_chain_s(tmp_path):
    # Intel lowers the clock for dense AVX-512: the FMA units' count is the tighter bound
    c = ceilings(tmp_path, cpu=ZEN4_VM, core_mhz=3700.0, fma_mhz=3000.0)
    fma32, gemm = c.loc[("vector_flops", "float32")], c.loc[("matrix_flops", "float32")]
    assert fma32.cpu_freq_mhz == pytest.approx(3000.0)
    assert fma32.physical_peak == pytest.approx(2 * 2 * 8 * 2 * 3000e6)
    assert "the FMA units'" in fma32.peak_basis and "scalar chain read 3.70 GHz" in fma32.peak_basis
    assert gemm.cpu_freq_mhz == pytest.approx(2900.0) and "FMA units'" in gemm.peak_basis


def test_the_fma_clock_chain_runs_more_integer_ops_than_its_fmas_need_cycles():
    from experiments.kernels.cpu_clock import tick_ops

    # (vector FMAs a cycle, FMAs a step) -> one-cycle integer ops a step: 1.5x the cycles the
    # FMAs need, so the integer chain sets the pace with the pipes two thirds full
    assert tick_ops(2.0, 16) == 12  # Sapphire Rapids, zmm: 8 cycles of FMAs
    assert tick_ops(1.0, 16) == 24  # Zen4, zmm in two passes: 16 cycles
    assert tick_ops(2.0, 8) == 6  # Haswell, 16 ymm registers: 4 cycles


def test_the_fma_units_count_a_clock_no_faster_than_the_cores():
    from experiments.kernels import cpu_clock, cpu_team

    crew = cpu_team.team([min(os.sched_getaffinity(0))])
    # one FMA a cycle: as many integer ops a step as the pipes' fastest rate on any core needs
    core, fma = cpu_clock.team_mhz(crew), cpu_clock.fma_mhz(crew, 1.0)
    # an integer chain LLVM shortened would read faster than the cores can run
    assert 300 < fma < 1.3 * core, (fma, core)


def test_the_chain_counts_a_plausible_clock_and_each_worker_keeps_its_fastest_round(
        monkeypatch):
    from experiments.kernels import cpu_clock, cpu_team

    mhz = cpu_clock.team_mhz(cpu_team.team([min(os.sched_getaffinity(0))]))
    assert 300 < mhz < 7000  # any core of this century, loaded or not

    class Team:  # two workers, one after the other; worker 1's first round waits 10 ms
        cpus, rounds = [0, 1], 0

        def run(self, fn, parts):
            Team.rounds += 1
            for (i,) in parts:
                fn(i)

    real, waited = cpu_clock._chain, []

    def chain(x, n):
        if x == 3 and not waited:  # worker 1 (x = i + 2): another process's turn on its core
            waited.append(time.sleep(0.01))
        return real(x, n)

    monkeypatch.setattr(cpu_clock, "_chain", chain)
    got = cpu_clock.team_mhz(Team())
    assert waited and Team.rounds == cpu_clock.ROUNDS and got == pytest.approx(mhz, rel=0.5)
