"""Count, check and time one call: the row fields of the one schema."""

from __future__ import annotations

from experiments.placement.checking import check
from experiments.placement.counting import count, precision


def time_calls(ctx, calls: list, kwargs=None) -> dict:
    """Time the calls in turn (copies rotate so a point is not timed hot in cache), replayed from
    a CUDA graph whatever their length when they can be captured, else eager launches."""
    kwargs = kwargs or {}
    n = len(calls)
    return ctx.time(lambda i: calls[i % n][0](*calls[i % n][1], **kwargs), force_graph=True)


def measure(ctx, fn, args, kwargs=None, calls=None) -> dict:
    """Count, check and time fn(*args): the row fields (raises as count and check do)."""
    with precision(ctx.dtype):
        counts = count(fn, args, kwargs)
        err, info = check(fn, args, kwargs, ctx.dtype, counts["bytes"])
        stats = time_calls(ctx, calls or [(fn, args)], kwargs)
    return row_fields(counts, stats, err, info)


def row_fields(counts: dict, stats: dict, err: float, info: dict) -> dict:
    params = {k: v for k, v in counts.items() if k not in ("flops", "bytes")}
    params |= info | {"flop_counter": "FlopCounterMode + formulas", "bytes_counted": "compulsory",
                      "graph": stats.get("timer") == "cuda_event_graph"}
    return stats | {"flops": counts["flops"], "bytes": counts["bytes"],
                    "working_set_bytes": int(counts["bytes"]), "rel_error": err,
                    "check_passed": True, "params": params}
