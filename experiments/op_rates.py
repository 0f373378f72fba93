"""The rates torch's standard building blocks attain on this machine: machine characterization
for the op model, as the bandwidth and GEMM sweeps are (docs/placement.md, "Op rates").

Each module of MODULES (torch's modules one by one, experiments/models/modules.py, and the
shipped 3x3 convolution and causal attention, experiments/models) is built by its factory at
its own sizes and at each of `shapes`' (more of the axes its cost depends on: channels, spatial
size, sequence, heads, head dimension, causal, rows by width, table rows and bag; the --full
preset's) at this experiment's calibration batches, then counted, checked and timed as the workload
experiment times a call: the counter (experiments/placement/counting.py), the check, fresh
copies rotated until they span `rotate_bytes_factor` LLCs, replayed from a CUDA graph whatever
its length (experiments/placement/measure.py). On the GPU the batches are none that the placed
calls use (config/config.yaml; those are config/presets/modules.yaml's and the sweep's
`workloads:`), so the op model never reads a rate measured on the call it is judged on.

A row is the call's dominant aten op, the one that moves at least DOMINANT of its ops' bytes:
`op` that aten op, `variant` its class's variant (conv1d ... conv_transpose2d, hd64: the op
class, experiments/placement/opclass.py), `flops` and `bytes` the counter's for that op,
`working_set_bytes` its bytes, `time_s` the call's: `flop_per_s` and `byte_per_s` are the op's
rates. `params` keep the class key, the op's input shapes, the module, the call's other ops.
A call spread over several ops (RMSNorm runs decomposed on a CPU) or whose op has no class is
a `not_applicable` row saying so; a point that fails is a row with its status (`op` the
module's name).
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING

from experiments import models
from experiments.core.budget import SlowPointGuard, rotation_copies
from experiments.core.config import ConfigError, ExperimentConfig
from experiments.core.dtypes import torch_dtype
from experiments.core.harness import Point, State
from experiments.core.runner import Context, NotApplicable, Unsupported
from experiments.models import modules
from experiments.placement import checking, counting, floors, opclass, target
from experiments.placement.measure import time_calls as measure_calls

NAME = "op_rates"
DESCRIPTION = "the FLOP/s or B/s torch's convolutions, attention, norms, pooling, gathers attain"

# module -> factory; each is also a field of the config: its calibration batches
MODULES = {
    "conv1d": modules.make_conv1d, "conv2d": models.make_conv2d, "conv3d": modules.make_conv3d,
    "conv_transpose2d": modules.make_conv_transpose2d, "sdpa": modules.make_sdpa,
    "attention_prefill": models.make_attention_prefill, "batch_norm": modules.make_batch_norm,
    "layer_norm": modules.make_layer_norm, "group_norm": modules.make_group_norm,
    "rms_norm": modules.make_rms_norm, "softmax": modules.make_softmax,
    "gelu": modules.make_gelu, "max_pool2d": modules.make_max_pool2d,
    "avg_pool2d": modules.make_avg_pool2d, "embedding_bag": modules.make_embedding_bag,
    "mha": modules.make_mha, "encoder_layer": modules.make_encoder_layer,
    "add": modules.make_add, "permute_copy": modules.make_permute_copy,
}
FLOOR, GEMM_HOT = opclass.FLOOR, opclass.GEMM_HOT  # the variants of floor and hot-GEMM rows
DOMINANT = 0.9  # the share of the call's op bytes its one op must move to stand for the call
OPS = ("op", "input_shapes", "calls", "flops", "bytes", "cold_bytes", "kind", "flops_source",
       "exponentials")  # counting.summarize_ops's columns


@dataclass
class OpRatesConfig(ExperimentConfig):
    name: str = NAME
    modules: list[str] = MISSING  # which of MODULES run, each at its batches below
    conv1d: list[int] = MISSING
    conv2d: list[int] = MISSING
    conv3d: list[int] = MISSING
    conv_transpose2d: list[int] = MISSING
    sdpa: list[int] = MISSING
    attention_prefill: list[int] = MISSING
    batch_norm: list[int] = MISSING
    layer_norm: list[int] = MISSING
    group_norm: list[int] = MISSING
    rms_norm: list[int] = MISSING
    softmax: list[int] = MISSING
    gelu: list[int] = MISSING
    max_pool2d: list[int] = MISSING
    avg_pool2d: list[int] = MISSING
    embedding_bag: list[int] = MISSING
    mha: list[int] = MISSING
    encoder_layer: list[int] = MISSING
    add: list[int] = MISSING
    permute_copy: list[int] = MISSING
    # more calibration shapes than each factory's own: "module key=value ..." (the factory's
    # keywords, e.g. "conv2d c_in=64 c_out=64 size=28"), each timed at the module's batches, or
    # at its own `batch=N` alone
    shapes: list[str] = MISSING
    own_sizes: bool = MISSING  # false: `shapes` alone, not also each factory's own sizes
    # aten ops whose dispatch floor is timed on a tiny input (experiments/placement/floors.py)
    floor_ops: list[str] = MISSING
    # hot thin GEMMs x [side, width] @ W [width, width], timed as a profiled op (CPU only)
    gemm_sides: list[int] = MISSING
    gemm_widths: list[int] = MISSING
    max_call_s: float = MISSING  # skip a point whose predicted call is longer (slow CPUs)
    rotate_bytes_factor: float = MISSING  # rotate copies until they span this many LLCs
    max_copies: int = MISSING

    RULES = dict.fromkeys(MODULES, "sizes") | {"max_call_s": "> 0", "rotate_bytes_factor": "> 0",
                                                "max_copies": "int >= 1", "own_sizes": "bool"}

    def __post_init__(self):
        super().__post_init__()
        unknown = sorted(set(self.modules) - set(MODULES))
        if unknown or not self.modules or len(set(self.modules)) != len(self.modules):
            raise ConfigError(f"experiment.modules={list(self.modules)}: give each at most once; "
                              f"allowed: {list(MODULES)}")
        for text in self.shapes:
            parse_shape(text)
        if unknown := sorted(set(self.floor_ops) - set(floors.OPS)):
            raise ConfigError(f"experiment.floor_ops: {unknown} not timed; allowed: "
                              f"{list(floors.OPS)}")


Config = OpRatesConfig


def parse_shape(text: str) -> tuple[str, dict]:
    """("module", {keyword: int or bool}) of a `shapes` entry "module key=value ..."; ConfigError
    naming the entry when its module is unknown or a value is not an integer or true/false."""
    name, *pairs = str(text).split()
    if name not in MODULES:
        raise ConfigError(f"experiment.shapes entry {text!r}: module {name!r} is not one of "
                          f"{list(MODULES)}")
    kwargs = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        flag = {"true": True, "false": False}.get(value.lower())
        if not eq or not key or (flag is None and not value.isdigit()):
            raise ConfigError(f"experiment.shapes entry {text!r}: give key=integer or "
                              f"key=true/false, not {pair!r}")
        kwargs[key] = flag if flag is not None else int(value)
    return name, kwargs


def shapes_of(cfg: OpRatesConfig, name: str) -> list[dict]:
    """The factory keywords module `name` is timed at: its own sizes ({}), then cfg.shapes'."""
    own = [{}] if cfg.own_sizes else []
    return own + [kw for n, kw in map(parse_shape, cfg.shapes) if n == name]


def batches_of(cfg: OpRatesConfig, name: str, kwargs: dict) -> list[int]:
    """The batches a shape is timed at: its own `batch=N`, else the module's, smallest first."""
    return [kwargs["batch"]] if "batch" in kwargs else sorted(getattr(cfg, name))


def target_of(factory) -> str:
    return f"{factory.__module__}:{factory.__name__}"


def dominant(ops: list[list]) -> dict:
    """The op (counting.summarize_ops's fields) that stands for the call, with its class key and
    term; NotApplicable when no one op moves DOMINANT of the bytes, it runs more than once, or
    it has no class."""
    ops = [dict(zip(OPS, o)) for o in ops]
    top = max(ops, key=lambda o: (o["bytes"], o["flops"]))
    total = sum(o["bytes"] for o in ops)
    if top["bytes"] < DOMINANT * total:
        names = ", ".join(o["op"] for o in ops)
        raise NotApplicable(f"the call runs as {len(ops)} ops here ({names}) and none moves "
                            f"{DOMINANT:.0%} of their bytes: no one op's rate")
    found = opclass.op_class(top["op"], top["input_shapes"])
    if found is None or top["calls"] != 1:
        raise NotApplicable(f"{top['op']} {top['input_shapes']} (x{top['calls']}) has no op-rate "
                            "class (experiments/placement/opclass.py)")
    return top | {"class": found[0], "term": found[1],
                  "other_ops": [o["op"] for o in ops if o is not top]}


def measure_floor(state: State) -> dict:
    """A `floor` row: one tiny call of the op, its time under the profiler (`time_s`) and by the
    host clock (params `host_s`), and the job's threads (params `threads`: the op model splits a
    CPU op's work over those torch gives it, analysis/cpuops.py)."""
    ctx = state.ctx
    with counting.precision(ctx.dtype):
        got = floors.measure(state.args["floor"], torch_dtype(ctx.dtype), ctx.device,
                             ctx.generator)
    return {"time_s": got["profiled_s"], "timer": "torch_profiler", "flops": 0.0,
            "bytes": 0.0, "check_passed": True,
            "params": state.row["params"] | {"host_s": got["host_s"],
                                             "input_shapes": got["input_shapes"],
                                             "threads": got["threads"]}}


def measure_gemm(state: State) -> dict:
    """A `gemm_hot` row: x [m, n] @ W [n, n] timed hot under the profiler (floors.py)."""
    ctx, m, n = state.ctx, state.row["m"], state.row["n"]
    with counting.precision(ctx.dtype):
        got = floors.measure_gemm(m, n, torch_dtype(ctx.dtype), ctx.device, ctx.generator)
    flops = 2.0 * m * n * n
    # the rate of its work: the dispatch, timed apart, is the floor's (cpuops adds it back)
    return {"time_s": got["profiled_s"], "timer": "torch_profiler", "flops": flops,
            "flop_per_s": flops / got["work_s"], "check_passed": True,
            "params": state.row["params"] | {"input_shapes": got["input_shapes"],
                                             "work_s": got["work_s"]}}


def measure(state: State) -> dict:
    if "floor" in state.args:
        return measure_floor(state)
    if "gemm" in state.args:
        return measure_gemm(state)
    ctx, cfg, factory, kwargs = state.ctx, state.cfg, state.args["factory"], state.args["kwargs"]
    if ctx.dtype == "float8_e4m3":
        raise Unsupported("float8_e4m3 is a matmul mode: torch's modules run in plain dtypes")
    dt, batch = torch_dtype(ctx.dtype), state.row["batch"]
    fn, args = target.build(factory, batch, dt, ctx.device, ctx.generator, kwargs)
    with counting.precision(ctx.dtype):
        counts = counting.count(fn, args)
        op = dominant(counts["ops"])
        _, _, variant = op["class"].partition("/")
        row = {"op": op["op"], "variant": variant or None, "flops": op["flops"],
               "bytes": op["bytes"], "working_set_bytes": int(op["bytes"])}
        # each module and shape by its own rates: the guard learns from its earlier batches
        mine = state.rows[len(state.rows) - state.args["index"]:]
        guard = SlowPointGuard.after(cfg.max_call_s, mine)
        if skipped := guard.skip(counts["flops"], counts["bytes"]):
            return row | skipped
        err, info = checking.check(fn, args, None, ctx.dtype, counts["bytes"])
        n = rotation_copies(counts["bytes"], ctx.facts.llc_bytes, cfg.rotate_bytes_factor,
                            at_most=cfg.max_copies, free_bytes=ctx.free_memory())
        # copies hold whole tables where a gather reads a few rows: as many as fit
        n = max(1, min(n, int(ctx.free_memory() / 2 // counts.get("resident_bytes", 1.0))))
        # fresh draws from the factory: weights and inputs at other addresses (the workload's way)
        calls = [(fn, args)] + [target.build(factory, batch, dt, ctx.device, ctx.generator,
                                             kwargs) for _ in range(n - 1)]
        stats = measure_calls(ctx, calls)
    params = {k: op[k] for k in ("class", "term", "input_shapes", "cold_bytes", "kind",
                                 "flops_source", "exponentials", "other_ops")}
    params |= info | {"call_flops": counts["flops"], "call_bytes": counts["bytes"], "copies": n,
                      "graph": stats.get("timer") == "cuda_event_graph"}
    return stats | row | {"rel_error": err, "check_passed": True,
                          "params": state.row["params"] | params}


def points(cfg: OpRatesConfig, ctx: Context) -> list[Point]:
    """One per module, shape and batch, smallest batch first; then on a CPU one per floor op
    and hot GEMM (a GPU's launch floor holds; its GEMMs run from its sweeps)."""
    cpu = ctx.device.type == "cpu" and ctx.dtype != "float8_e4m3"
    floor = [Point({"op": op, "variant": FLOOR, "batch": 1, "params": {"module": FLOOR}},
                   {"floor": op}) for op in cfg.floor_ops] if cpu else []
    floor += [Point({"op": "aten::addmm", "variant": GEMM_HOT, "batch": 1, "m": s, "n": c,
                     "k": c, "params": {"module": GEMM_HOT}}, {"gemm": True})
              for c in cfg.gemm_widths for s in cfg.gemm_sides] if cpu else []
    return [Point({"op": name, "batch": b, "params": {
                       "module": name, "target": target_of(MODULES[name]), "kwargs": sized}},
                  {"factory": MODULES[name], "kwargs": sized, "index": i})
            for name in cfg.modules for kwargs in shapes_of(cfg, name)
            for sized in [{k: v for k, v in kwargs.items() if k != "batch"}]
            for i, b in enumerate(batches_of(cfg, name, kwargs))] + floor
