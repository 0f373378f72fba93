"""What the measurements ran under: per system how many points were contended (CPU) or throttled
(GPU), the clocks and power a plateau ran at, and the energy of a FLOP and of a DRAM byte.

Rows written before the condition columns existed (the first published H200 set) give NaN and
"not recorded", never an error: every helper reads a missing column as all-null.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from experiments.core.config import job_default
from experiments.analysis.dataset import add_labels, ok, params
from experiments.analysis.roofline import cache_windows, fastest_variant, top_plateau

NOT_RECORDED = "not recorded"
GPU_CLOCKS = ("cuda_event", "torch_profiler")  # timers that read the GPU's own clock


def host_clocked(rows: pd.DataFrame) -> pd.Series:
    """Rows timed by the host's clock: on a GPU, only these feel a busy host CPU (a point timed
    by CUDA events or the profiler is not disturbed by it)."""
    timer = rows["timer"] if "timer" in rows else pd.Series("", index=rows.index)
    return ~timer.fillna("").astype(str).str.startswith(GPU_CLOCKS)
ENERGY_COLUMNS = ["source", "host", "device", "device_kind", "device_name", "system", "dtype",
                  "experiment", "unit", "value", "points", "points_with_energy", "sm_clock_mhz",
                  "power_w", "power_w_q10", "power_w_q90", "power_w_max", "points_power_dropped",
                  "power", "note"]


def _num(rows: pd.DataFrame, name: str) -> pd.Series:
    """A numeric column as floats, all NaN where the rows lack it."""
    if name not in rows:
        return pd.Series(np.nan, index=rows.index, dtype=float)
    return pd.to_numeric(rows[name], errors="coerce").astype(float)


def _flags(rows: pd.DataFrame, name: str) -> pd.Series:
    """A bool column as 1.0 / 0.0, NaN where not judged."""
    if name not in rows:
        return pd.Series(np.nan, index=rows.index, dtype=float)
    return rows[name].map(lambda v: float(v) if isinstance(v, (bool, np.bool_)) else np.nan)


def _median(values: pd.Series) -> float:
    v = values.dropna()
    return float(v.median()) if len(v) else math.nan


def _max(values: pd.Series) -> float:
    v = values.dropna()
    return float(v.max()) if len(v) else math.nan


def _mean(values: pd.Series) -> float:
    v = values.dropna()
    return float(v.mean()) if len(v) else math.nan


def _reasons(rows: pd.DataFrame) -> list[str]:
    if "throttle_reasons" not in rows:
        return []
    return sorted({name for text in rows.throttle_reasons.dropna() for name in str(text).split(",")
                   if name})


def _labelled(rows: pd.DataFrame) -> pd.DataFrame:
    return rows if "system" in rows else add_labels(rows)


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def plateau_conditions(rows: pd.DataFrame) -> dict:
    """What the given rows (a ceiling's plateau, say) ran at: median SM clock and power, NaN where
    not recorded."""
    return {
        "points": int(len(rows)),
        "sm_clock_mhz": _median(_num(rows, "sm_clock_mhz")),
        "mem_clock_mhz": _median(_num(rows, "mem_clock_mhz")),
        "power_w": _median(_num(rows, "power_w")),
        **power_spread(rows),
        "temperature_c": _max(_num(rows, "temperature_c")),
        "cpu_freq_mhz": _median(_num(rows, "cpu_freq_mhz")),
        "throttle_reasons": _reasons(rows),
    }


def power_spread(rows: pd.DataFrame) -> dict:
    """The distribution of the rows' power (10th, 90th percentile, max), how many rows had theirs
    dropped as above the power limit, and `power`, one line for the report beside the clock."""
    p = _num(rows, "power_w").dropna()
    dropped = int((rows["energy_note"].fillna("") != "").sum()) if "energy_note" in rows else 0
    out = {"power_w_q10": float(p.quantile(0.1)) if len(p) else math.nan,
           "power_w_q90": float(p.quantile(0.9)) if len(p) else math.nan,
           "power_w_max": float(p.max()) if len(p) else math.nan,
           "points_power_dropped": dropped}
    out["power"] = (f"{p.median():.0f} W on its one point" if len(p) == 1 else
                    f"{p.median():.0f} W median ({out['power_w_q10']:.0f}-"
                    f"{out['power_w_q90']:.0f} W, 10th-90th percentile; max "
                    f"{out['power_w_max']:.0f} W) over {len(p)} points" if len(p) else
                    f"power {NOT_RECORDED}") + (
        f"; {dropped} read above the power limit, left out" if dropped else "")
    return out


def _cpu_text(share: pd.Series, threshold: float, points: str = "CPU points") -> str:
    judged = share.dropna()
    if judged.empty:
        return f"CPU load {NOT_RECORDED}"
    loaded = float((judged > threshold).mean())
    most = f"max {_pct(judged.max())}"
    if loaded > 0:
        return (f"measured under load: {_pct(loaded)} of {points} had other processes (or the "
                f"VM's host) using > {_pct(threshold)} of the cores, or of a team thread's time "
                f"({most})")
    return (f"quiet: no CPU point had other processes (or the VM's host) using > "
            f"{_pct(threshold)} of the cores, or of a team thread's time ({most})")


def _gpu_text(g: pd.DataFrame, throttled: float, capped: float) -> str:
    sm, power = _median(_num(g, "sm_clock_mhz")), _median(_num(g, "power_w"))
    others = _num(g, "gpu_other_processes")
    shared = _mean((others > 0).where(others.notna()))
    parts = []
    if shared > 0:  # NaN (not recorded) compares False
        parts.append(f"measured under load: another process ran on the GPU during "
                     f"{_pct(shared)} of points")
    if math.isnan(sm) and math.isnan(power) and math.isnan(throttled):
        return "; ".join(parts + [f"clocks and power {NOT_RECORDED}"])
    if not math.isnan(throttled):
        parts.append(f"{_pct(throttled)} of points throttled (thermal, or a low SM clock)")
    if not math.isnan(capped):
        parts.append(f"power cap on {_pct(capped)}")
    if not math.isnan(sm):
        parts.append(f"SM clock median {sm:.0f} MHz")
    if not math.isnan(power):
        parts.append(f"power median {power:.0f} W")
    return ", ".join(parts)


def system_conditions(rows: pd.DataFrame,
                      threshold: float | None = None) -> dict[str, dict]:
    """Per system (its label): shares of ok points contended / throttled (of those judged; NaN when
    none was), the most CPU time other processes took, median clocks and power, the throttle
    reasons seen, and `summary`, one line for the report.

    `contended_share` counts the rows' flags (set against the job's threshold, in each file's
    metadata `conditions`); `loaded_share` and the summary line use `threshold` (None: the
    job's default, config/job.yaml)."""
    if threshold is None:
        threshold = job_default("contention_threshold")
    out = {}
    for system, g in ok(_labelled(rows)).groupby("system", sort=False):
        kind = str(g.device_kind.iloc[0])
        # on a GPU, only its host-clocked points can be disturbed by other processes; the load
        # of a point: other processes' share, its VM's host's (steal), or the share of its CPU
        # team's time a thread spent off its CPU, whichever is largest
        judged_rows = g if kind == "cpu" else g[host_clocked(g)]
        share = pd.concat([_num(judged_rows, c) for c in (
            "other_cpu_share", "steal_share", "team_off_cpu_share")], axis=1).max(axis=1, skipna=True)
        reasons = _reasons(g)
        throttled = _mean(_flags(g, "throttled"))
        recorded = g.throttle_reasons.dropna() if "throttle_reasons" in g else pd.Series([], dtype=str)
        capped = float(recorded.str.contains("sw_power_cap").mean()) if len(recorded) else math.nan
        judged = share.dropna()
        # the clocks the cores and their FMA units counted after the FMA and GEMM points
        # (kernels/cpu_clock.py)
        counted = params(g)
        out[system] = {
            "device_kind": kind,
            "points": int(len(g)),
            "contended_share": _mean(_flags(g, "contended")),
            "loaded_share": float((judged > threshold).mean()) if len(judged) else math.nan,
            "throttled_share": throttled,
            "power_capped_share": capped,
            "max_other_cpu_share": _max(_num(g, "other_cpu_share")),
            "max_steal_share": _max(_num(g, "steal_share")),
            "max_team_off_cpu_share": _max(_num(g, "team_off_cpu_share")),
            "median_cpu_freq_mhz": _median(_num(g, "cpu_freq_mhz")),
            "median_core_mhz": _median(_num(counted, "core_mhz")),
            "median_fma_mhz": _median(_num(counted, "fma_mhz")),
            "median_sm_clock_mhz": _median(_num(g, "sm_clock_mhz")),
            "median_power_w": _median(_num(g, "power_w")),
            "max_temperature_c": _max(_num(g, "temperature_c")),
            "throttle_reasons": reasons,
            "summary": _cpu_text(share, threshold) if kind == "cpu" else _gpu_text(
                g, throttled, capped),
        }
        if kind != "cpu" and out[system]["loaded_share"] > 0:
            # a GPU's host-side timings (launches) pay for a loaded CPU too: say it was
            out[system]["summary"] += "; " + _cpu_text(share, threshold,
                                                        "host-clocked points")
    return out


def _energy_row(g: pd.DataFrame, experiment: str, unit: str, column: str, note: str) -> dict:
    per = _num(g, column) * 1e12  # J -> pJ
    cond = plateau_conditions(g)
    value = _median(per)
    return {"experiment": experiment, "unit": unit, "value": value, "points": int(len(g)),
            "points_with_energy": int(per.notna().sum()), "sm_clock_mhz": cond["sm_clock_mhz"],
            "power_w": cond["power_w"], **power_spread(g),
            "note": note if not math.isnan(value) else f"energy {NOT_RECORDED}"}


def energy_table(rows: pd.DataFrame, facts: dict[str, dict] | None = None) -> pd.DataFrame:
    """Per system and dtype: pJ per FLOP on the top plateau of matmul and of intensity
    (flop_per_s within 10 % of its 90th percentile; intensity: its fastest variant), and pJ per
    byte of the bandwidth rows whose working set is DRAM-sized (>= 4x the last-level cache from
    `facts`, system label -> device facts; without them, the top two octaves of size), each with
    the median SM clock and power those rows ran at. `value` is the median; NaN and
    "energy not recorded" where the rows have no energy."""
    facts = facts or {}
    out = []
    for (system, dtype), g in ok(_labelled(rows)).groupby(["system", "dtype"], sort=False):
        ident = {k: g[k].iloc[0] for k in ("source", "host", "device", "device_kind",
                                           "device_name", "system", "dtype") if k in g}
        mm = g[(g.experiment == "matmul") & (_num(g, "flop_per_s") > 0)]
        if len(mm):
            top = mm[top_plateau(mm.flop_per_s)]
            out.append(ident | _energy_row(top, "matmul", "pJ/FLOP", "j_per_flop",
                                           "GEMM top plateau"))
        fma = g[(g.experiment == "intensity") & (_num(g, "flop_per_s") > 0)]
        if len(fma):
            fma, variant = fastest_variant(fma)
            top = fma[top_plateau(fma.flop_per_s)]
            out.append(ident | _energy_row(top, "intensity", "pJ/FLOP", "j_per_flop",
                                           "FMA sweep top plateau" + (f" ({variant})" if variant else "")))
        bw = g[(g.experiment == "bandwidth") & (_num(g, "working_set_bytes") > 0)
               & (_num(g, "byte_per_s") > 0)]
        if len(bw):
            ws = bw.working_set_bytes.astype(float)
            lo = cache_windows(facts.get(system) or {}, float(ws.max()))[-1][1]
            dram = bw[ws >= lo]
            if len(dram):
                out.append(ident | _energy_row(dram, "bandwidth", "pJ/byte", "j_per_byte",
                                               f"DRAM-sized working sets (>= {lo:.3g} B)"))
    return pd.DataFrame(out).reindex(columns=ENERGY_COLUMNS)


def shared_gpus(rows: pd.DataFrame) -> list[str]:
    """One line per GPU that another process used while its points measured (their `contended`
    flag, from NVML's process list): which GPU, how many of its ok points, and for how long
    (the timed part of those points, and the span of their timestamps)."""
    out = []
    if "gpu_other_processes" not in rows:
        return out
    for system, g in ok(_labelled(rows)).groupby("system", sort=False):
        if str(g.device_kind.iloc[0]) == "cpu":
            continue
        hit = g[_num(g, "gpu_other_processes") > 0]
        if hit.empty:
            continue
        timed = float((_num(hit, "time_s") * _num(hit, "samples")
                       * _num(hit, "inner_reps").fillna(1)).sum())
        when = pd.to_datetime(hit["measured_at"], utc=True) if "measured_at" in hit else None
        span = "" if when is None or when.isna().all() else \
            f", {when.min():%H:%M:%S}-{when.max():%H:%M:%S} UTC"
        most = int(_num(hit, "gpu_other_processes").max())
        out.append(f"shared GPU: {g.device_name.iloc[0]} ({g.device.iloc[0]} @ {g.host.iloc[0]}) "
                   f"ran beside {f'{most} other processes' if most > 1 else 'another process'}"
                   f" in {len(hit)} of {len(g)} points "
                   f"({timed:.1f} s timed{span}); ceilings leave those points out")
    return out
