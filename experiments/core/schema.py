"""The one row schema that every experiment writes (docs/schema.md documents each field)."""

from __future__ import annotations

import json
import math

import pyarrow as pa

STATUSES = ("ok", "oom", "unsupported", "not_applicable", "skipped", "wrong_result", "error",
            "timeout", "crashed")  # the last two: user code (core/isolate.py)
# The host clock without a synchronize times only the launch (timing's host_nosync, C5): the
# rates of its rows read past any device on purpose, so no physical limit applies to them.
LAUNCH_ONLY_TIMER = "perf_counter_nosync"

SCHEMA = pa.schema(
    [
        # identity
        pa.field("experiment", pa.string(), nullable=False),
        pa.field("op", pa.string(), nullable=False),
        pa.field("variant", pa.string()),  # a method or mode within an op (pinned, graph, ...)
        pa.field("claims", pa.list_(pa.string())),
        pa.field("host", pa.string(), nullable=False),
        pa.field("device", pa.string(), nullable=False),  # cpu, cuda:0, a GPU pool cuda:0+1
        pa.field("measured_on", pa.string()),  # the device that ran it (a pool's member)
        pa.field("device_kind", pa.string(), nullable=False),  # cpu | cuda
        pa.field("device_name", pa.string()),
        pa.field("dtype", pa.string(), nullable=False),
        # the point's parameters
        pa.field("n", pa.int64()),  # elements per array / matrix side / columns C
        pa.field("m", pa.int64()),
        pa.field("k", pa.int64()),
        pa.field("batch", pa.int64()),
        pa.field("working_set_bytes", pa.int64()),  # all operands of one call together
        pa.field("params", pa.string()),  # JSON: anything else the experiment sweeps
        # the work, counted from the operation's definition
        pa.field("flops", pa.float64()),
        pa.field("bytes", pa.float64()),  # fewest bytes one call must move through memory
        pa.field("intensity", pa.float64()),  # flops / bytes
        # the time distribution of one call, seconds
        pa.field("time_s", pa.float64()),  # median
        pa.field("time_s_min", pa.float64()),
        pa.field("time_s_q10", pa.float64()),
        pa.field("time_s_q25", pa.float64()),
        pa.field("time_s_q75", pa.float64()),
        pa.field("time_s_q90", pa.float64()),
        pa.field("time_s_mean", pa.float64()),
        pa.field("time_s_std", pa.float64()),
        pa.field("cv", pa.float64()),
        pa.field("samples", pa.int64()),
        pa.field("inner_reps", pa.int64()),
        pa.field("timer", pa.string()),
        pa.field("noisy", pa.bool_()),  # CV past the threshold after a retry (launch rows: median)
        # what the timed run ran under (core/conditions.py); null where not readable
        pa.field("sm_clock_mhz", pa.float64()),  # GPU: median over the run (NVML)
        pa.field("mem_clock_mhz", pa.float64()),  # GPU: median
        pa.field("power_w", pa.float64()),  # GPU: median of NVML's power reading
        pa.field("temperature_c", pa.float64()),  # GPU: max
        pa.field("throttle_reasons", pa.string()),  # GPU: clock-event reasons seen, "" = none
        pa.field("energy_j", pa.float64()),  # GPU: joules per call
        pa.field("cpu_freq_mhz", pa.float64()),  # median CPU frequency
        pa.field("other_cpu_share", pa.float64()),  # other processes' share of all CPU time
        pa.field("steal_share", pa.float64()),  # hypervisor steal share of all CPU time
        pa.field("team_off_cpu_share", pa.float64()),  # CPU team: off its CPUs, best sample
        pa.field("gpu_other_processes", pa.int64()),  # GPU: others seen busy on it (NVML)
        pa.field("contended", pa.bool_()),  # others above contention_threshold / on the GPU
        pa.field("throttled", pa.bool_()),  # GPU: thermal or unexplained low clock after a retry
        # rates from the median time
        pa.field("flop_per_s", pa.float64()),
        pa.field("byte_per_s", pa.float64()),
        pa.field("j_per_flop", pa.float64()),  # energy_j / flops
        pa.field("j_per_byte", pa.float64()),  # energy_j / bytes
        # the check of what was timed
        pa.field("rel_error", pa.float64()),
        pa.field("check_passed", pa.bool_()),
        # what happened
        pa.field("status", pa.string(), nullable=False),
        pa.field("message", pa.string()),
        # provenance a group-by needs (the rest is in the file's metadata)
        pa.field("run_id", pa.string()),
        pa.field("git_commit", pa.string()),
        pa.field("torch_version", pa.string()),
        pa.field("measured_at", pa.timestamp("us", tz="UTC")),
    ]
)

COLUMNS = SCHEMA.names
# Columns added after files were published: a file without them still reads, with nulls
# (`measured_on` is filled from `device` instead, store.read_measurements).
LATER_COLUMNS = ("sm_clock_mhz", "mem_clock_mhz", "power_w", "temperature_c", "throttle_reasons",
                 "energy_j", "cpu_freq_mhz", "other_cpu_share", "steal_share", "contended",
                 "throttled", "j_per_flop", "j_per_byte", "team_off_cpu_share",
                 "gpu_other_processes")
METADATA_KEY = b"rooflab"
# Written into every measurement file's metadata (and a merged set's: core/store.py) and checked
# on reading: a file of another row schema or time unit is refused, naming it.
SCHEMA_VERSION = 1
TIME_UNIT = "s"  # every time_s* column
FORMAT = {"schema_version": SCHEMA_VERSION, "time_unit": TIME_UNIT}


INT64 = (-(2**63), 2**63 - 1)
INT_COLUMNS = tuple(f.name for f in SCHEMA if pa.types.is_integer(f.type))


def past_int64(row: dict) -> dict:
    """The row's integer columns whose value an int64 cannot hold ({column: value})."""
    return {k: row[k] for k in INT_COLUMNS if isinstance(row.get(k), (int, float))
            and not isinstance(row[k], bool) and not INT64[0] <= row[k] <= INT64[1]}


def too_large(big: dict) -> str:
    return ("not measured: " + ", ".join(f"{k}={v:.3g}" for k, v in big.items()) +
            f" is past what a row holds (int64, at most {INT64[1]:.3g}) and any device's memory")


def finish_row(row: dict) -> dict:
    """Derive intensity and rates, check the status, and keep only schema columns."""
    unknown = set(row) - set(COLUMNS)
    if unknown:
        raise KeyError(f"row has columns outside the schema: {sorted(unknown)}")
    if row.get("status") not in STATUSES:
        raise ValueError(f"status={row.get('status')!r}; allowed: {STATUSES}")
    if big := past_int64(row):  # a point never measured (Context.point): the file is still written
        row.update({k: None for k in big},
                   message="; ".join(m for m in (row.get("message"), too_large(big)) if m))
    flops, nbytes, t = row.get("flops"), row.get("bytes"), row.get("time_s")
    if flops is not None and nbytes:
        row.setdefault("intensity", flops / nbytes)
    if t and t > 0 and not math.isnan(t):
        if flops is not None:
            row.setdefault("flop_per_s", flops / t)
        if nbytes is not None:
            row.setdefault("byte_per_s", nbytes / t)
    energy = row.get("energy_j")
    if energy is not None and not math.isnan(energy):
        if flops:
            row.setdefault("j_per_flop", energy / flops)
        if nbytes:
            row.setdefault("j_per_byte", energy / nbytes)
    if isinstance(row.get("params"), dict):
        row["params"] = json.dumps(row["params"], sort_keys=True)
    return {name: utf8(v) if isinstance(v := row.get(name), str) else v for name in COLUMNS}


def utf8(text: str) -> str:
    """`text` as UTF-8 can hold it: a byte that did not decode (a lone surrogate, as
    surrogateescape keeps a file name's) becomes its escape, \\udcff, instead of an error."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def to_table(rows: list[dict], metadata: dict) -> pa.Table:
    table = pa.Table.from_pylist([finish_row(dict(r)) for r in rows], schema=SCHEMA)
    return table.replace_schema_metadata({METADATA_KEY: json.dumps(metadata, default=str)})
