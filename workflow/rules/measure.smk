# One job per (experiment, device, dtype), and per (workload, device, dtype) of config.yaml's
# `workloads:` (experiment `workload`): python -m experiments writes one Parquet file.

rule measure:
    input:
        stamp=job_stamp,
    output:
        MEASUREMENT,
    log:
        layout.under(RESULTS, layout.JOB_LOG),
    wildcard_constraints:
        # only this machine's files: another host's, copied in, are inputs, never re-measured here
        host=re.escape(HOST),
        device="cpu|cuda[0-9]+([+][0-9]+)*",
        experiment="[a-z_][a-z0-9_]*",
        case="([a-z0-9_]+-)?[a-z0-9_]+",  # dtype, or workload-dtype
    params:
        # every override of the job, out= included: a changed sweep value reruns just its jobs
        args=job_args,
        # what else shapes it (defaults, code, package versions): a change reruns its jobs
        inputs=job_inputs,
    conda:
        "../../environment.yml"
    # A CPU measurement takes every core so no other job disturbs it (or all but one per GPU,
    # pinned away from the GPU jobs running beside it: cpu_gpu_overlap); a GPU job takes one GPU
    # (of its pool: the job locks whichever is free), and a job between GPUs (peer_copy,
    # collectives) all of them (it locks every one).
    threads: job_threads
    priority: measure_priority
    resources:
        pin_cpus=pin_cpus,
        **{DeviceName.from_slug(slug).resource:
           (lambda wildcards, s=slug: device_units(wildcards, s)) for slug in DEVICES},
        **{key: (lambda wildcards, key=key: slurm_resource(wildcards, key))
           for key in SLURM_JOB["cpu"]},
    shell:
        "python -m experiments {params.args} cpus={resources.pin_cpus} > {log:q} 2>&1"
