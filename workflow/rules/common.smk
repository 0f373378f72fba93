# Config validation, the sweep grid and input functions. Nothing here measures anything.
import json
import re
import shlex
import socket

from snakemake.utils import validate


validate(config, "../schemas/config.schema.yaml")

SAFE = re.compile(r"[^A-Za-z0-9._-]")


def resolve_devices(setting):
    """Device slugs (cpu, cuda0 ...). "auto": the CPU plus every GPU this machine shows."""
    if setting == "auto":
        import torch  # only here: parsing a workflow without "auto" does not need torch

        return ["cpu", *(f"cuda{i}" for i in range(torch.cuda.device_count()))]
    return [d if d == "cpu" else f"cuda{d.partition(':')[2] or 0}" for d in setting]


def device_name(slug):
    return "cpu" if slug == "cpu" else f"cuda:{slug[4:]}"


def device_kind(slug):
    return "cpu" if slug == "cpu" else "cuda"


HOST = SAFE.sub("_", socket.gethostname() if config["host"] == "auto" else config["host"])
DEVICES = resolve_devices(config["devices"])
RESULTS = config["results"]

# One measurement job per device at a time: each device is a resource of capacity 1.
for _slug in DEVICES:
    workflow.register_resource(_slug, 1)


def grid():
    """(experiment, device, dtype) of every measurement job in the sweep."""
    return [
        (exp, dev, dtype)
        for exp, spec in config["experiments"].items()
        for dev in DEVICES
        for dtype in spec["dtypes"]
    ]


def measurement_files():
    return [
        f"{RESULTS}/measurements/{HOST}/{dev}/{exp}/{dtype}.parquet"
        for exp, dev, dtype in grid()
    ]


def hydra_value(value):
    """A config value as a Hydra override value: JSON for numbers and lists, quoted strings."""
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace("'", "\\'")
        return f"'{escaped}'"
    return json.dumps(value)


def job_args(wildcards, output):
    """The job's command-line overrides, one shell-quoted word each."""
    kind = device_kind(wildcards.device)
    spec = config["experiments"][wildcards.experiment]
    settings = {**config.get("job", {}).get(kind, {})}
    settings.update({f"experiment.{k}": v for k, v in spec.get(kind, {}).items()})
    return shlex.join(
        [
            f"experiment={wildcards.experiment}",
            f"device={device_name(wildcards.device)}",
            f"dtype={wildcards.dtype}",
            f"host={hydra_value(HOST)}",
            f"out={hydra_value(str(output))}",
            *(f"{key}={hydra_value(value)}" for key, value in settings.items()),
        ]
    )

