"""The figures, each declared once: its name, report category, caption and the experiments it
draws from. Everything else reads this: the workflow's outputs (workflow/rules/aggregate.smk, at
parse time), the HTML report's captions (render.py), `@figure` and `draw_all` (figures/). No heavy
imports here, so the Snakefile can `from experiments.report.catalog import FIGURES` cheaply.
Which claims a figure shows is said once, by each claim (its `figure`, else its section's:
experiments/analysis/claims/); the experiments are the modules at experiments/' top."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    """One figure, written as results/figures/<name>.svg; a figure whose experiments have no rows
    is a placeholder that says which experiment is missing, so the workflow's outputs never
    change. Snakemake's report shows it with workflow/report/<name>.rst."""

    name: str
    category: str  # its category in Snakemake's report
    caption: str  # what it shows: the HTML report's caption
    experiments: tuple[str, ...]  # whose ok rows it draws


FIGURES: dict[str, Figure] = {f.name: f for f in (
    Figure("roofline", "Roofline",
           "measured and datasheet rooflines with every experiment's points",
           ("bandwidth", "matmul", "intensity", "decode")),
    Figure("bandwidth", "Memory", "bandwidth vs working-set size, with cache levels and plateaus "
           "(GPUs: blocks rereading resident tiles, `reread`, show L1)", ("bandwidth", "l1")),
    Figure("matmul", "Compute", "GEMM TFLOP/s and error against float64 per dtype", ("matmul",)),
    Figure("decode", "Decode", "x @ W time per step and tokens/s vs batch, with the prediction",
           ("decode",)),
    Figure("timing", "Host and device",
           "timing methods compared: host clock, synced, CUDA events", ("timing",)),
    Figure("transfer", "Host and device",
           "host-device copies: GB/s vs size with the fitted model", ("transfer",)),
    Figure("launch", "Launch geometry", "kernel time vs grid size in waves over the SMs",
           ("launch",)),
    Figure("peer_copy", "GPU to GPU", "copy matrix: GB/s per ordered GPU pair at the largest size, "
           "and GB/s vs size by copy engine and SM kernel", ("peer_copy",)),
    Figure("collectives", "GPU to GPU", "NCCL all-reduce, all-gather, reduce-scatter: bus "
           "bandwidth vs size", ("collectives",)),
)}

