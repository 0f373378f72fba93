"""Device names as configs, paths and resources spell them. No torch here: the workflow parses
these names on a login node or in an environment without torch.

A name is `cpu`, `cuda:N`, or a pool of identical GPUs `cuda:0+1`: a job given a pool runs on
whichever of its GPUs is free (see core.device.claim_device)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

PATTERN = re.compile(r"^(auto|cpu|cuda|cuda:\d+(\+\d+)*)$")
MULTI_GPU = ("split", "each")


class DeviceError(ValueError):
    """A device name that is malformed or names hardware this machine does not have."""


def check(name) -> str:
    if not isinstance(name, str) or not PATTERN.match(name):
        raise DeviceError(
            f"device={name!r} is not a device name; allowed: auto, cpu, cuda, cuda:N, "
            "or a pool of identical GPUs cuda:N+M"
        )
    indices = gpu_indices(name)
    if len(set(indices)) != len(indices):
        raise DeviceError(f"device={name!r} names a GPU twice")
    return name


def gpu_indices(name: str) -> list[int]:
    """cuda:0+1 -> [0, 1]; cuda -> [0]; cpu and auto -> []."""
    if name == "cuda":
        return [0]
    if not name.startswith("cuda:"):
        return []
    return [int(i) for i in name[5:].split("+")]


def pool_name(indices: Sequence[int]) -> str:
    return "cuda:" + "+".join(str(i) for i in indices)


def slug(name: str) -> str:
    """Path-safe: cpu, cuda0, cuda0+1."""
    return "cpu" if name == "cpu" else "cuda" + "+".join(str(i) for i in gpu_indices(name))


def from_slug(text: str) -> str:
    return "cpu" if text == "cpu" else "cuda:" + text[4:]


def resource(text: str) -> str:
    """A Snakemake resource name for a device slug (identifier characters only)."""
    return text.replace("+", "_")


@dataclass(frozen=True)
class DeviceName:
    """One device name in each of its spellings: `name` as configs write it (cuda:0+1), `slug`
    as paths do (cuda0+1), `resource` as Snakemake's resources do (cuda0_1)."""

    name: str

    def __post_init__(self):
        check(self.name)

    @classmethod
    def from_slug(cls, text: str) -> "DeviceName":
        return cls(from_slug(text))

    @property
    def slug(self) -> str:
        return slug(self.name)

    @property
    def resource(self) -> str:
        return resource(self.slug)

    @property
    def gpus(self) -> list[int]:
        return gpu_indices(self.name)

    def __str__(self) -> str:
        return self.name


def sweep_devices(setting, multi_gpu: str, gpu_models: Callable[[], list[str]]) -> list[str]:
    """The device names a sweep measures.

    `setting` is "auto" (the CPU plus every GPU `gpu_models()` lists) or a list of names.
    multi_gpu "each" measures every GPU on its own; "split" pools the GPUs of one model, so their
    share of the sweep runs on whichever is free. `gpu_models()` (index -> model name) is only
    called when a pool could form: torch is slow to import."""
    if multi_gpu not in MULTI_GPU:
        raise DeviceError(f"multi_gpu={multi_gpu!r}; allowed: {', '.join(MULTI_GPU)}")
    if setting == "auto":
        models = gpu_models()
        names = ["cpu", *(f"cuda:{i}" for i in range(len(models)))]
    else:
        names = [check(n) for n in setting]
        models = None
    out, gpus = [], []
    for name in names:
        if name == "auto":
            raise DeviceError('"auto" stands alone: devices: auto, not inside a list')
        indices = gpu_indices(name)
        if len(indices) == 1 and multi_gpu == "split":
            gpus.append(indices[0])
        elif (name := pool_name(indices) if indices else name) not in out:
            out.append(name)
    if len(gpus) > 1:
        models = models if models is not None else gpu_models()
        missing = [i for i in gpus if i >= len(models)]
        if missing:
            raise DeviceError(
                f"devices lists cuda:{missing[0]}, but this machine shows {len(models)} GPU(s)")
        by_model: dict[str, list[int]] = {}
        for i in dict.fromkeys(gpus):
            by_model.setdefault(models[i], []).append(i)
        out += [pool_name(indices) for indices in by_model.values()]
    else:
        out += [pool_name(gpus)] if gpus else []
    return out
