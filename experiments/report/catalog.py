"""The figures, named at parse time by the workflow. No heavy imports here, so the Snakefile can
`from experiments.report.catalog import FIGURES` cheaply. Which claims a figure shows is said once,
by each claim (its `figure`, else its section's: experiments/analysis/claims/); the experiments are
the modules at experiments/' top."""

from __future__ import annotations

# name -> (report category, what it shows, experiments it draws from). Every name is produced as
# results/figures/<name>.svg; a figure whose experiments have no rows is a placeholder
# that says which experiment is missing, so the workflow's outputs never change.
FIGURES = {
    "roofline": ("Roofline", "measured and datasheet rooflines with every experiment's points",
                 ("bandwidth", "matmul", "intensity", "decode")),
    "bandwidth": ("Memory", "bandwidth vs working-set size, with cache levels and plateaus "
                  "(GPUs: blocks rereading resident tiles, `reread`, show L1)",
                  ("bandwidth", "l1")),
    "matmul": ("Compute", "GEMM TFLOP/s and error against float64 per dtype", ("matmul",)),
    "decode": ("Decode", "x @ W time per step and tokens/s vs batch, with the prediction",
               ("decode",)),
    "timing": ("Host and device", "timing methods compared: host clock, synced, CUDA events",
               ("timing",)),
    "transfer": ("Host and device", "host-device copies: GB/s vs size with the fitted model",
                 ("transfer",)),
    "launch": ("Launch geometry", "kernel time vs grid size in waves over the SMs", ("launch",)),
    "peer_copy": ("GPU to GPU", "copy matrix: GB/s per ordered GPU pair at the largest size, and "
                  "GB/s vs size by copy engine and SM kernel", ("peer_copy",)),
    "collectives": ("GPU to GPU", "NCCL all-reduce, all-gather, reduce-scatter: bus bandwidth vs "
                    "size", ("collectives",)),
}
