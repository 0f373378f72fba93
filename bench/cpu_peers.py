"""rooflab's CPU ceilings beside public peers on the same machine: STREAM's triad (DRAM),
mixbench-cpu's peak (vector FMA, fp32/fp64) and the best torch.mm over n = 2048, 4096, 8192
(matrix). For comparison only: rooflab neither ships nor calls the peers.

  python bench/cpu_peers.py build SRC BUILD   # SRC holds STREAM/ and mixbench/ (.peers/)
  python bench/cpu_peers.py peers BUILD OUT   # runs them and torch.mm, writes OUT/peers.json
                                              # (and OUT/peers.partial.json round by round)
  python bench/cpu_peers.py table OUT CEILINGS  # the side-by-side table (OUT/cpu_peers.csv)

Peers run as their authors document them: gcc -O3 -march=native -fopenmp, one OpenMP thread per
physical core, pinned (OMP_PLACES=cores, OMP_PROC_BIND=spread); STREAM's arrays 8x the LLC
(all sockets'), at least 100 M doubles, a round decimal count (not a multiple of 2 MiB); STREAM
and torch.mm run ROUNDS times, STREAM before and after rooflab's own DRAM points, then rooflab's
GEMM points, torch.mm and one of the other peers (`_rounds`), each at its best over the rounds.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the GEMM dtypes compared with torch.mm (float16 only where the CPU has half arithmetic), and
# torch.mm's sizes, as a user's own comparison would take them
MM_DTYPES = ("float32", "bfloat16", "float16")
MM_SIZES = (2048, 4096, 8192)
sys.path.insert(0, str(ROOT))


def _machine():
    from experiments.core.cpus import read_topology
    topo = read_topology()
    llc = max(topo.cache_total(topo.team()).values(), default=32 << 20)
    return topo, llc


def _omp_env(threads: int) -> dict:
    return os.environ | {"OMP_NUM_THREADS": str(threads), "OMP_PLACES": "cores",
                         "OMP_PROC_BIND": "spread"}


# STREAM's iterations per run (its NTIMES; its headline is their best). 50, not 20: a run then
# samples 10-14 s (the VM 10, the node 13), as long as rooflab's DRAM window (ten points of
# experiment.bandwidth dram_steady_s, 1.5 s). Both tools report a best over time on machines whose
# DRAM rate moves second by second; a best over 1.5 s of triads against one over 15 s favours the
# longer (the node at b03e443: rooflab 117.6 GB/s, STREAM's four 20-iteration runs 88.8-95.3).
# Chosen after seeing that data: docs/benchmarks.md "A DRAM window of 15 s" has both sides.
STREAM_NTIMES = 50


def stream_doubles(llc: int) -> int:
    """STREAM's doubles per array: 8x the LLC's bytes, at least 10^8, a round decimal (build)."""
    return max(100_000_000, -(-llc // 10_000_000) * 10_000_000)


def build(src: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    _, llc = _machine()
    # doubles per array: 8x the LLC's bytes, rounded up to a round decimal as STREAM's default
    # (10^8) and a user's -DSTREAM_ARRAY_SIZE are. The node's 300 MiB LLC made 314,572,800, a
    # multiple of 2 MiB: its three static arrays then start at one offset in a 2 MiB page
    # (kernels/cpu_stream.py STAGGER; on the VM STREAM read 25-28 GB/s at such sizes, 34-41 at
    # 10^8). On the node it read 83-100 and 89-92 GB/s in two calls at that size, rooflab's
    # staggered triad 86-95 and 118-134 beside them: not conclusive there, but no user's size.
    # Its 320 M (arrays at one 4 KiB offset) read as OFFSET=170, 314,572,800 and 321 M did, run
    # by run at 83-87 or 101-107 (four rounds alternated, docs/benchmarks.md "Dtype, pages or
    # placement"): on the node the placement is not the gap.
    n = stream_doubles(llc)
    flags = ["-O3", "-march=native", "-fopenmp"]
    streams = {"stream": []}
    if "avx512f" in Path("/proc/cpuinfo").read_text():
        # a diagnostic beside it: STREAM at rooflab's vector width (gcc tunes -march=native on
        # Intel's AVX-512 servers to 256-bit vectors; rooflab's kernels store whole 64-byte
        # lines with 512-bit ones, kernels/numba_host.py)
        streams["stream512"] = ["-mprefer-vector-width=512"]
    for name, extra in streams.items():
        subprocess.run(["gcc", *flags, *extra, "-mcmodel=medium", f"-DSTREAM_ARRAY_SIZE={n}",
                        f"-DNTIMES={STREAM_NTIMES}", str(src / "STREAM" / "stream.c"), "-o",
                        str(out / name)],
                       check=True)
    mix = src / "mixbench" / "mixbench-cpu"
    (out / "version_info.h").write_text('#define VERSION_INFO "rooflab-peers"\n')
    subprocess.run(["g++", "-std=c++17", *flags, "-funroll-loops",
                    f"-I{src / 'mixbench' / 'include'}", f"-I{out}", str(mix / "main.cpp"),
                    str(mix / "mix_kernels_cpu.cpp"), "-o", str(out / "mixbench-cpu")], check=True)
    print(f"built STREAM ({n} doubles per array) and mixbench-cpu in {out}")


def _stream(build_dir: Path, threads: int, binary: str = "stream", suffix: str = "") -> dict:
    text = subprocess.run([str(build_dir / binary)], env=_omp_env(threads), check=True,
                          capture_output=True, text=True).stdout
    found = {m[1].lower(): [float(x) for x in m.groups()[1:]] for m in
             re.finditer(r"^(Copy|Scale|Add|Triad):\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)",
                          text, re.M)}
    rates = {k: best * 1e6 for k, (best, *_) in found.items()}
    # the triad's mean and slowest iteration beside its best (rate x min time / time): on the node
    # one run's triad read 97-109 GB/s for its first 10 iterations and 79-89 for its last 40, so
    # a gap between two tools' bests can sit inside one tool's own run
    best, mean_t, min_t, max_t = found["triad"]
    spread = {f"stream_triad_mean{suffix}": best * 1e6 * min_t / mean_t,
              f"stream_triad_slowest{suffix}": best * 1e6 * min_t / max_t}
    return {f"stream_{k}{suffix}": v for k, v in rates.items()} | spread | {
        f"stream{suffix}_log": text[-1500:]}


THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _stream_huge(build_dir: Path, threads: int) -> dict:
    """STREAM once more with transparent huge pages on for every mapping ('always'), where this
    process may set that (root on a machine lent whole), then the setting put back. rooflab's
    stream arrays ask for huge pages (madvise; kernels/cpu_stream.py host_empty) and STREAM's
    static arrays get them only under 'always': this run says what the page size alone is worth
    (on the node: nothing in one call, 84.9-86.6 GB/s against 85.2-86.2 in the runs beside
    them; 110.6 against 80.0-104.6 in another). A diagnostic beside the comparison, not part of
    it."""
    try:
        mode = re.search(r"\[(\w+)\]", THP.read_text())[1]
    except (OSError, TypeError):
        return {}
    if mode == "always":
        return {"thp_mode": mode}  # the first run had them already
    try:
        THP.write_text("always")
    except OSError:
        return {"thp_mode": mode}
    try:
        res = _stream(build_dir, threads)
    finally:
        THP.write_text(mode)
    return {k + "_huge": v for k, v in res.items() if k != "stream_log"} | {"thp_mode": mode}


def _mixbench(build_dir: Path, threads: int) -> dict:
    # 8 Mi doubles (64 MB): the peak is compute-bound whatever the size, and the default 512 MB
    # takes minutes at 512 iterations on a small CPU
    text = subprocess.run([str(build_dir / "mixbench-cpu"), "8"], env=_omp_env(threads),
                          check=True, capture_output=True, text=True).stdout
    sp, dp = [], []
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) >= 9 and cols[0].isdigit():
            sp.append(float(cols[3]))
            dp.append(float(cols[7]))
    return {"mixbench_float32": max(sp) * 1e9, "mixbench_float64": max(dp) * 1e9,
            "mixbench_log": text[-1500:]}


def mm_call_times(a, b, out=None, secs: float = 1.0) -> list[float]:
    """Each call's seconds of torch.mm(a, b) (into `out` where given) after one warm-up call: at
    least 3 calls and `secs`."""
    import torch
    call = (lambda: torch.mm(a, b)) if out is None else (lambda: torch.mm(a, b, out=out))
    call()
    times, t0 = [], time.perf_counter()
    while len(times) < 3 or time.perf_counter() - t0 < secs:
        t1 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t1)
    return times


def _torch_mm(dtypes=MM_DTYPES, sizes=MM_SIZES) -> dict:
    """The best FLOP/s of torch.mm over `sizes` (its default threads: all of this process's
    CPUs), at least 3 calls and 1 s per size; a size whose call would pass 10 s is left out.
    Beside it the median call at the best call's size (`_median`): a best far above its median
    is a burst (the node's AMX read 9-14 TFLOP/s for seconds, 4.4-5.7 between them); and that
    size (`_n`: a size timed in more calls has more chances at a fast one)."""
    import statistics

    import torch
    out = {}
    for name in dtypes:
        dt = getattr(torch, name)
        best, median, best_n, last = 0.0, 0.0, 0, None
        for n in sizes:
            if last and last * 8 > 10:
                break
            a, b = torch.randn(n, n).to(dt), torch.randn(n, n).to(dt)
            times = mm_call_times(a, b)
            last, rates = times[-1], [2 * n**3 / t for t in times]
            if max(rates) > best:
                best, median, best_n = max(rates), statistics.median(rates), n
        out[f"torch_mm_{name}"], out[f"torch_mm_{name}_median"] = best, median
        out[f"torch_mm_{name}_n"] = best_n
    return out


# Rounds: STREAM's headline is the best of its iterations (STREAM_NTIMES), over seconds; on a
# machine shared with neighbours that moves from one run to the next. The node's DRAM rate flips
# between two levels within seconds, for STREAM and rooflab alike (the two alternated for 3
# rounds: STREAM's triad read 84.9-87.0 GB/s in 7 runs and 104.0-106.9 in 2; rooflab's triad, best
# of 8 calls, 79-84 or 99-111, with 256- or 512-bit vectors, on huge or 4 KiB pages alike), and
# can stay at one for a whole bandwidth job (at 97a2628 the sweep's DRAM points read at most 91.5,
# STREAM 89.0-106.8 in six runs over the two minutes after); the 2-core VM's triad 22-47 GB/s
# seconds apart. The node's torch.mm moves as much (float16 1.17-1.55 TFLOP/s from call to call).
# So the bench runs ROUNDS rounds (env ROUNDS overrides) of: STREAM, rooflab's own DRAM points
# once more (its bandwidth job over the sweep's DRAM arrays), STREAM again, rooflab's GEMM points
# once more (its matmul job over torch.mm's sizes, per dtype), torch.mm, then one of the other
# peers. Each is taken at its best over the rounds: both tools in the same minutes. STREAM runs
# twice a round because one 8-s run (20 iterations then) met the node's fast level in 6 of 16 runs
# (12:21 UTC 2026-12-03, four array placements alike: docs/benchmarks.md), rooflab's DRAM job,
# some 50 calls over two sizes and five ops, in 4 of 4 beside them. Three rounds (one per other
# peer): on a node whose sweep took 230 s, five did not finish within a device call's 600 s (four
# took over 340 s).
ROUNDS = int(os.environ.get("ROUNDS", 3))


def _override(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(map(str, value)) + "]"
    return str(value)


@functools.cache
def _config(name: str) -> dict:
    import yaml
    return yaml.safe_load((ROOT / "config" / name).read_text())


def _rooflab_job(work: Path, name: str, experiment: str, dtype: str, **settings):
    """The rows of one rooflab job run alone, with the sweep's settings for a CPU (config.yaml's
    job.cpu and experiments.<experiment>.cpu) and `settings` over them."""
    import pandas as pd
    sweep = _config("config.yaml")
    exp = sweep["experiments"][experiment].get("cpu") or {}
    out = work / f"{name}.parquet"
    subprocess.run([sys.executable, "-m", "experiments", f"experiment={experiment}",
                    "device=cpu", f"dtype={dtype}", f"out={out}",
                    *(f"{k}={_override(v)}" for k, v in sweep["job"]["cpu"].items()),
                    *(f"experiment.{k}={_override(v)}" for k, v in (exp | settings).items())],
                   cwd=ROOT, check=True, capture_output=True)
    rows = pd.read_parquet(out)
    return rows[rows.status == "ok"]


def _dram_sizes() -> list[int]:
    """Bytes per array of the sweep's DRAM window (bandwidth.dram_sizes, from the CPU's device
    facts as the sweep reads them)."""
    import torch

    from experiments.bandwidth import dram_sizes
    from experiments.core.device import device_facts
    _, llc = _machine()
    memory = device_facts(torch.device("cpu")).memory_bytes
    return dram_sizes(_config("experiment/bandwidth.yaml")["dram_arrays"], llc, memory)


def _rooflab_dram(work: Path, k: int, sizes) -> dict:
    """The best rate of rooflab's DRAM points (float32, numba's kernels) over `sizes`: the DRAM
    ceiling's statistic, a host-clocked CPU's best point, over every op; and its triad's alone
    (STREAM's op: the ceiling's best over five ops and 50 calls can catch a faster moment than
    one op's does)."""
    ok = _rooflab_job(work, f"dram_{k}", "bandwidth", "float32", from_machine=False, sizes=sizes)
    ok = ok[ok.variant == "numba"]
    rate = ok.bytes / ok.time_s_min
    return {"rooflab_dram": float(rate.max()),
            "rooflab_dram_triad": float(rate[ok.op == "triad"].max())}


def _best_flops(work: Path, name: str, experiment: str, dtype: str, **settings) -> float:
    """The best FLOP/s of one rooflab job's points (a host-clocked CPU ceiling's statistic)."""
    ok = _rooflab_job(work, name, experiment, dtype, **settings)
    return float((ok.flops / ok.time_s_min).max())


def _rooflab_mm(work: Path, k: int, dtypes) -> dict:
    """The best FLOP/s of rooflab's GEMM points per dtype over the sweep's sizes, under its rules
    (max_call_s, rising_call_s, the plateau's stop): the matrix ceiling's statistic."""
    return {f"rooflab_mm_{d}": _best_flops(work, f"mm_{d}_{k}", "matmul", d) for d in dtypes}


# the FMA chain's compute-bound points (config/config.yaml's CPU intensity sweep ends at 1024),
# in mixbench-cpu's two precisions
FMA_TOP = (256, 512, 1024)
FMA_DTYPES = ("float32", "float64")


def _rooflab_fma(work: Path) -> dict:
    """The best FLOP/s of rooflab's FMA chain per dtype over its top points (FMA_TOP): the vector
    ceiling's statistic, run right after mixbench-cpu (the same minute; on the 2-core VM the sweep's
    float64 read 0.89 of a mixbench run minutes later, and its cores halve for seconds)."""
    return {f"rooflab_fma_{d}": _best_flops(work, f"fma_{d}", "intensity", d, fmas=list(FMA_TOP))
            for d in FMA_DTYPES}


def _rounds(build_dir: Path, threads: int, others=(), work: Path | None = None,
            partial: Path | None = None) -> dict:
    """ROUNDS rounds of STREAM, rooflab's DRAM points and STREAM again, rooflab's GEMM points
    (where `work` is given: their files go there), torch.mm and one of `others` (callables;
    their results merged in). `partial`: each round's results written there as it ends (a run
    cut short by a time limit keeps its finished rounds)."""
    runs, merged = [], {}
    dtypes, sizes = _mm_dtypes(), (_dram_sizes() if work is not None else None)
    for k in range(max(ROUNDS, len(others))):
        run = _stream(build_dir, threads)
        if work is not None:
            run |= _rooflab_dram(work, k, sizes)
            # STREAM again right after rooflab's DRAM points: the round's STREAM is the better of
            # the two runs around them (each listed in stream_triad_each)
            after = _stream(build_dir, threads)
            each = [run["stream_triad"], after["stream_triad"]]
            run |= {key: max(run[key], v) for key, v in after.items() if not key.endswith("_log")}
            run |= {"stream_triad_each": each} | _rooflab_mm(work, k, dtypes)
        runs.append(run | _torch_mm(dtypes))
        if k < len(others):
            merged |= others[k]()
        if partial is not None:
            partial.write_text(json.dumps({"rounds": [{key: v for key, v in r.items()
                                                       if not key.endswith("_log")} for r in runs],
                                           "others": merged}, indent=1))
    keys = [k for k in runs[0] if not k.endswith("_log")]
    # a size (_n) has no best, nor the runs of a round (_each): only their rounds
    best = {k: max(r[k] for r in runs) for k in keys if not k.endswith(("_n", "_each"))}
    return merged | best | {f"{k}_runs": [r[k] for r in runs] for k in keys} | {
        "stream_log": runs[-1]["stream_log"]}


def _mm_dtypes(flags: set[str] | None = None) -> tuple[str, ...]:
    """torch.mm's dtypes here: float16 and bfloat16 only where the CPU has their arithmetic (its
    ISA flags, as matmul.cpu_supports reads them), else torch converts every element and times
    the conversion (on the 2-core Zen 1 VM, AVX2 only, rooflab's bfloat16 GEMM job over n =
    2048-8192 ran 12 minutes and was stopped)."""
    from experiments.core.cpus import BF16_ARITHMETIC, HALF_ARITHMETIC, isa_flags
    flags = isa_flags() if flags is None else flags
    has = {"float16": bool(HALF_ARITHMETIC & flags), "bfloat16": bool(BF16_ARITHMETIC & flags)}
    return tuple(d for d in MM_DTYPES if has.get(d, True))


def peers(build_dir: Path, out: Path) -> None:
    topo, _ = _machine()
    threads = len(topo.team())
    res = {"threads": threads, "load_before": os.getloadavg()[0]}
    others = [lambda: _stream_huge(build_dir, threads),
              lambda: _mixbench(build_dir, threads) | _rooflab_fma(build_dir)]
    if (build_dir / "stream512").exists():  # the diagnostic build (build())
        others.insert(1, lambda: _stream(build_dir, threads, "stream512", "_512"))
    out.mkdir(parents=True, exist_ok=True)
    res |= _rounds(build_dir, threads, others, work=build_dir,
                   partial=out / "peers.partial.json")
    res["load_after"] = os.getloadavg()[0]
    (out / "peers.json").write_text(json.dumps(res, indent=1))
    print({k: v for k, v in res.items() if not k.endswith("_log")})


# (rooflab ceiling, dtype, peer key, lower bound, upper bound) of the comparison
PAIRS = [("dram_bw", None, "stream_triad", 0.95, 1.05),
         ("vector_flops", "float32", "mixbench_float32", 0.9, None),
         ("vector_flops", "float64", "mixbench_float64", 0.9, None),
         ("matrix_flops", "float32", "torch_mm_float32", 0.95, None),
         ("matrix_flops", "bfloat16", "torch_mm_bfloat16", 0.95, None),
         ("matrix_flops", "float16", "torch_mm_float16", 0.95, None)]


def table(out: Path, ceilings: Path) -> None:
    import pandas as pd
    res = json.loads((out / "peers.json").read_text())
    # without the sweep's ceilings (a call of the peers alone) only the alternated rows
    c = pd.read_parquet(ceilings) if ceilings.exists() else None
    cpu = c[(c.device_kind == "cpu") & (c.source == "run")] if c is not None else None
    rows = []
    # the diagnostic STREAMs (huge pages: _stream_huge; 512-bit vectors: build()) where they ran
    extra = [("dram_bw", None, key, 0.95, 1.05) for key in ("stream_triad_huge", "stream_triad_512")
             if key in res]
    # rooflab's DRAM and GEMM points rerun between the peers' runs (_rounds): the same minutes
    alternated = [("rooflab_dram", None, "stream_triad", 0.95, 1.05),
                  ("rooflab_dram_triad", None, "stream_triad", 0.95, 1.05)] + [
        (f"rooflab_mm_{d}", d, f"torch_mm_{d}", 0.95, None)
        for d in MM_DTYPES] + [
        (f"rooflab_fma_{d}", d, f"mixbench_{d}", 0.9, None) for d in FMA_DTYPES]
    alternated = [pair for pair in alternated if pair[0] in res]
    for ceiling, dtype, key, lo, hi in (PAIRS + extra if cpu is not None else []) + alternated:
        if key not in res:  # not run here (torch.mm float16 where the CPU has no half arithmetic)
            continue
        silicon = float("nan")  # the sweep's FMA and GEMM ceilings: of the silicon's peak
        if ceiling in res:  # an alternated row: its range over the rounds (one run: itself)
            runs = res.get(f"{ceiling}_runs", [res[ceiling]])
            ours, ci = res[ceiling], (min(runs), max(runs))
        else:
            hit = cpu[(cpu.ceiling == ceiling) & ((cpu.dtype == dtype) if dtype else True)]
            ours = (float(hit.value.iloc[0]) if len(hit) and hit.value.notna().iloc[0]
                    else float("nan"))
            ci = ((float(hit.ci_low.iloc[0]), float(hit.ci_high.iloc[0])) if len(hit)
                  else (None, None))
            if len(hit) and "of_physical_peak" in hit:
                silicon = float(hit.of_physical_peak.iloc[0])
        peer = res.get(key, float("nan"))
        ratio = ours / peer if peer else float("nan")
        ok = ratio >= lo and (hi is None or ratio <= hi)
        rows.append({"ceiling": ceiling, "dtype": dtype, "rooflab": ours, "ci_low": ci[0],
                     "ci_high": ci[1], "peer": key, "peer_value": peer, "ratio": ratio,
                     "target": f">= {lo}" + (f", <= {hi}" if hi else ""), "met": bool(ok),
                     "of_physical_peak": silicon})
    pd.DataFrame(rows).to_csv(out / "cpu_peers.csv", index=False)
    print(f"\nCPU ceilings beside peers ({res['threads']} threads, load "
          f"{res['load_before']:.1f} -> {res['load_after']:.1f}), G = 1e9 B/s or FLOP/s:")
    if "stream_triad_each_runs" in res:  # two runs a round, bracketing rooflab's points
        print("STREAM's triad, run by run (before, after rooflab's points): " + "; ".join(
            ", ".join(f"{v / 1e9:.1f}" for v in pair) for pair in res["stream_triad_each_runs"])
              + " (the table: their best)")
    elif "stream_triad_runs" in res:
        print("STREAM's triad, run by run: " + ", ".join(
            f"{v / 1e9:.1f}" for v in res["stream_triad_runs"]) + " (the table: their best)")
    if "stream_triad_slowest_runs" in res:
        print("STREAM's triad within its runs, round by round (mean, slowest iteration): " +
              "; ".join(f"{m / 1e9:.1f}, {s / 1e9:.1f}" for m, s in zip(
                  res["stream_triad_mean_runs"], res["stream_triad_slowest_runs"]))
              + " (each the higher of its round's two runs)")
    for key, what in [("rooflab_dram", "rooflab's DRAM points"),
                      ("rooflab_dram_triad", "rooflab's DRAM triad points")] + [
            pair for d in MM_DTYPES for pair in (
                (f"torch_mm_{d}", f"torch.mm {d}"),
                (f"torch_mm_{d}_median", f"torch.mm {d}'s median call at its best size"),
                (f"rooflab_mm_{d}", f"rooflab's {d} GEMM points"))]:
        if f"{key}_runs" in res:
            print(f"{what}, round by round: " + ", ".join(
                f"{v / 1e9:.1f}" for v in res[f"{key}_runs"])
                  + f" ({key}: {'their highest' if key.endswith('_median') else 'their best'})"
                  + (f"; at n = {', '.join(map(str, res[f'{key}_n_runs']))}"
                     if f"{key}_n_runs" in res else ""))
    # silicon: the ceiling over the silicon's peak at its points' clock (docs/cpu.md)
    print(f"{'ceiling':19} {'dtype':9} {'rooflab':>8} {'interval':>16} {'silicon':>7} "
          f"{'peer':>18} {'G':>8} {'ratio':>6}  target")
    for r in rows:
        ci = (f"[{r['ci_low'] / 1e9:.1f}, {r['ci_high'] / 1e9:.1f}]"
              if r["ci_low"] is not None else "")
        silicon = f"{r['of_physical_peak']:.0%}" if r["of_physical_peak"] > 0 else ""
        print(f"{r['ceiling']:19} {r['dtype'] or '':9} {r['rooflab'] / 1e9:8.1f} {ci:>16} "
              f"{silicon:>7} {r['peer']:>18} {r['peer_value'] / 1e9:8.1f} {r['ratio']:6.2f}  "
              f"{r['target']} {'ok' if r['met'] else 'MISSED'}")


if __name__ == "__main__":
    cmd, args = sys.argv[1], [Path(a) for a in sys.argv[2:]]
    {"build": build, "peers": peers, "table": table}[cmd](*args)
