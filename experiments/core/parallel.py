"""fork_map: independent pieces of an aggregate step (a decode curve's bootstrap, a figure) on
forked processes, one per CPU this process may use. They are pure-Python work (scipy's
least_squares, matplotlib's layout), which threads cannot share under the GIL; multiprocessing's
Pool is the library for that, and fork lets each worker start from the step's loaded state
(the dataset, the figure style) without pickling it. Results come back in order, so a step's
output does not depend on how many CPUs ran it."""

from __future__ import annotations

import multiprocessing
import os

from experiments.core.cpu_time import own_cpus


def cpus() -> int:
    return len(own_cpus() or ()) or os.cpu_count() or 1


def fork_map(fn, items) -> list:
    """[fn(x) for x in items], spread over forked workers where there are several items, CPUs
    and a fork start method; else in this process. fn is a module-level function (its name is
    what a worker is sent), items are picklable."""
    items = list(items)
    workers = min(len(items), cpus())
    if workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return [fn(x) for x in items]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        return pool.map(fn, items, chunksize=1)
