"""Issue 55: why a model's small CPU ops run slower than their calibrated floors on a many-core
host. Times the small ops of three held-out calls (clone, relu, add past and below torch's
grain) four ways, at the job's threads and at one:

- `in_call`: inside the module's call, profiled as `rooflab validate` profiles it;
- `hot`: the op alone, profiled, its inputs and output reused (a hot loop);
- `flushed`: the op after a 4 MB fill on every thread, as the dispatch floors are timed;
- `idle_Nus`: the op after N microseconds of one thread's work (the others idle, as they are
  after a serial op in a model);
- `out=`: the op writing a buffer made once (no fresh output pages to fault in).

Each line gives the minor page faults a profile took (median), and the run ends with the cost
of a first touch of a fresh 4 KiB page (an anonymous mapping, huge pages off).

    python bench/cpu_small_ops.py [--repeats 5] [--csv out.csv]
"""

from __future__ import annotations

import argparse
import mmap
import resource
import statistics
import time

import torch
import torch.nn as nn

from experiments.placement.profile import profile_ops

FLUSH = torch.empty(1 << 20)


def spin(us: float) -> None:
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end:
        pass


def modules(gen):
    def randn(*shape):
        return torch.randn(shape, generator=gen)

    enc1 = nn.TransformerEncoderLayer(384, 3, 768, dropout=0.0, batch_first=True).eval()
    enc2 = nn.TransformerEncoderLayer(288, 9, 576, dropout=0.0, batch_first=True).eval()
    gru = nn.GRU(2752, 224, 2, batch_first=True)
    return {"encoder_layer-b8-d384-seq15": (enc1, (randn(8, 15, 384),)),
            "encoder_layer-b3-d288-seq16": (enc2, (randn(3, 16, 288),)),
            "gru-b2-d2752-h224-seq6": (lambda x: gru(x)[0], (randn(2, 6, 2752),))}


def ops(gen):
    def randn(*shape):
        return torch.randn(shape, generator=gen)

    x1, y1, a2, b2 = randn(8, 15, 384), randn(8, 15, 768), randn(3, 16, 288), randn(3, 16, 288)
    t1, c2 = torch.empty(15, 8, 384), torch.empty_like(a2)
    return {"clone [15,8,384] (46k, past grain)": (lambda x: x.transpose(0, 1).contiguous(),
                                                   (x1,), "aten::clone"),
            "relu [8,15,768] (92k)": (torch.relu, (y1,), "aten::relu"),
            "clone [15,8,384] out=": (lambda x: t1.copy_(x.transpose(0, 1)), (x1,),
                                      "aten::copy_"),
            "add [3,16,288] (14k, below grain)": (torch.add, (a2, b2), "aten::add"),
            "add [3,16,288] out=": (lambda a, b: torch.add(a, b, out=c2), (a2, b2), "aten::add")}


def faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def first_touch(pages: int = 4096, rounds: int = 5) -> float:
    """Seconds a first write to a fresh 4 KiB page costs, less a second write's (least of
    rounds)."""
    import numpy as np
    best = []
    for _ in range(rounds):
        m = mmap.mmap(-1, pages * 4096)
        if hasattr(mmap, "MADV_NOHUGEPAGE"):
            m.madvise(mmap.MADV_NOHUGEPAGE)
        a = np.frombuffer(m, dtype=np.uint8)
        t0 = time.perf_counter(); a[::4096] = 1; t1 = time.perf_counter()
        a[::4096] = 2; t2 = time.perf_counter()
        best.append(((t1 - t0) - (t2 - t1)) / pages)
        del a
        m.close()
    return min(best)


def timed(fn, args, op, before) -> tuple[float, int]:
    def call(*a):
        before()
        return fn(*a)
    f0 = faults()
    t = profile_ops(call, args, device="cpu")
    return float(t[t.op == op].time_s.iloc[0]) * 1e6, faults() - f0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--csv")
    args = p.parse_args()
    gen = torch.Generator().manual_seed(0)
    threads = torch.get_num_threads()
    print(torch.__config__.parallel_info())
    rows = []
    ways = {"hot": lambda: None, "flushed": lambda: FLUSH.fill_(1.0),
            "idle_200us": lambda: spin(200), "idle_2000us": lambda: spin(2000)}
    for n in sorted({threads, 1}, reverse=True):
        torch.set_num_threads(n)
        for name, (mod, margs) in modules(gen).items():
            with torch.no_grad():
                runs = [profile_ops(mod, margs, device="cpu") for _ in range(args.repeats)]
            for op in ("aten::clone", "aten::relu", "aten::add"):
                for shapes in sorted({s for r in runs for s in r[r.op == op].input_shapes}):
                    us = [float(r[(r.op == op) & (r.input_shapes == shapes)].time_s.sum()) * 1e6
                          for r in runs]
                    rows.append((n, f"{name}: {op} {shapes}", "in_call", us, [-1]))
        for name, (fn, oargs, op) in ops(gen).items():
            for way, before in ways.items():
                if name.endswith("out=") and way != "hot":
                    continue
                got = [timed(fn, oargs, op, before) for _ in range(args.repeats)]
                rows.append((n, name, way, [t for t, _ in got], [f for _, f in got]))
    torch.set_num_threads(threads)
    print(f"{'threads':>7}  {'min us':>7} {'median':>7} {'max':>7} {'faults':>6}  way        op")
    for n, what, way, us, flt in rows:
        print(f"{n:>7}  {min(us):7.1f} {statistics.median(us):7.1f} {max(us):7.1f} "
              f"{statistics.median(flt):6.0f}  {way:<10} {what}")
    print(f"first touch of a fresh 4 KiB page: {first_touch() * 1e6:.3f} us")
    if args.csv:
        import pandas as pd
        pd.DataFrame([(n, w, way, u) for n, w, way, us, _ in rows for u in us],
                     columns=["threads", "what", "way", "us"]).to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
