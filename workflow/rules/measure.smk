# One job per (experiment, device, dtype): python -m experiments writes one Parquet file.

rule measure:
    output:
        MEASUREMENT,
    log:
        f"{RESULTS}/logs/{{host}}/{{device}}/{{experiment}}/{{dtype}}.log",
    wildcard_constraints:
        # only this machine's files: another host's, copied in, are inputs, never re-measured here
        host=re.escape(HOST),
        device="cpu|cuda[0-9]+([+][0-9]+)*",
        experiment="[a-z_][a-z0-9_]*",
        dtype="[a-z0-9_]+",
    params:
        # every override of the job, out= included: a changed sweep value reruns just its jobs
        args=job_args,
    conda:
        "../../environment.yml"
    # A CPU measurement takes every core so no other job disturbs it (or all but one per GPU,
    # pinned away from the GPU jobs running beside it: cpu_gpu_overlap); a GPU job takes one GPU
    # (of its pool: the job locks whichever is free), and a job between GPUs (peer_copy,
    # collectives) all of them (it locks every one).
    threads: job_threads
    resources:
        pin_cpus=pin_cpus,
        **{devicenames.resource(slug): (lambda wildcards, s=slug: device_units(wildcards, s))
           for slug in DEVICES},
        **{key: (lambda wildcards, key=key: slurm_resource(wildcards, key))
           for key in SLURM_JOB["cpu"]},
    shell:
        "python -m experiments {params.args} cpus={resources.pin_cpus} > {log:q} 2>&1"


# One job per (workload, device, dtype) of config/config.yaml's `workloads:`: the workload
# experiment runs that workload's batches and writes one Parquet file, as `measure` does.
rule measure_workload:
    output:
        WORKLOAD_MEASUREMENT,
    log:
        f"{RESULTS}/logs/{{host}}/{{device}}/workload/{{workload}}-{{dtype}}.log",
    wildcard_constraints:
        host=re.escape(HOST),
        device="cpu|cuda[0-9]+([+][0-9]+)*",
        workload="[a-z0-9_]+",
        dtype="[a-z0-9_]+",
    params:
        args=workload_args,
    conda:
        "../../environment.yml"
    threads: job_threads
    resources:
        pin_cpus=pin_cpus,
        **{devicenames.resource(slug): (lambda wildcards, s=slug: int(wildcards.device == s))
           for slug in DEVICES},
        **{key: (lambda wildcards, key=key: SLURM_JOB[device_kind(wildcards.device)][key])
           for key in SLURM_JOB["cpu"]},
    shell:
        "python -m experiments {params.args} cpus={resources.pin_cpus} > {log:q} 2>&1"
