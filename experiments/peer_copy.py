"""GPU to GPU copies: the copy matrix of every ordered pair of GPUs of the job's pool.

Rows: op `copy_engine` (`dst.copy_(src)` between devices with peer access on: a DMA engine moves
the bytes) or `copy_kernel` (a Triton kernel on the source GPU's SMs loads its memory and stores
into the peer's through peer access, experiments/kernels/sm_copy.py); variant `uni` (one copy src ->
dst, for every ordered pair: n(n-1) of them) or `bi` (src -> dst and dst -> src at once, on two
streams, for every unordered pair: one measurement serves both orders). Sizes are bytes per copy,
4 KiB to 1 GiB.

Bytes: `bytes` is what crosses the link in one call: the copy's size for `uni`, twice it for `bi`
(both directions), so `byte_per_s` is the one-way bandwidth of `uni` and the two ways' sum for
`bi`. `time_s` is the median time of one call, launched eagerly from Python as a program issues
copies (cross-device copies are not graph-captured): at 4 KiB it is the copy's latency as a
program sees it, launch included. Timed with CUDA events on the source GPU's stream, which the
copy runs on (bi: the second copy forks from and joins back into that stream).

`params`: src, dst (torch indices), pair ("0->1", "0<->1"), link (`nvlink` when NVML reports NVLink
P2P between the two, `pcie` when peer access works without it, `none` without peer access,
`unknown` when NVML cannot tell), peer_access (torch.cuda.can_device_access_peer), nvlink_p2p
(NVML's P2P status over NVLink), nvlinks_active (active NVLink links of the source GPU), gpus.

Every copy is checked equal to its source (NaN-poisoned destination, strided exact compare).
A pair without peer access is a row `unsupported` saying so. A CPU job or a one-GPU job has no
pair: every row is `not_applicable` ("not measurable here") with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations, permutations

import torch
from omegaconf import MISSING

from experiments.core.config import ExperimentConfig
from experiments.core.dtypes import itemsize, torch_dtype
from experiments.core.device import gpu_group
from experiments.core.harness import Point, State
from experiments.core.runner import Context, Unsupported, WrongResult

NAME = "peer_copy"
DESCRIPTION = "GPU-to-GPU copy matrix: every ordered pair, copy engine and SM kernel, uni and bi"
ALL_GPUS = True  # the job holds every GPU of its pool (core.runner.run_job)
NOT_ON = ("cpu",)  # no pair of GPUs: a sweep plans no CPU job

METHODS = ("copy_engine", "copy_kernel")
DIRECTIONS = ("uni", "bi")
LINKS = ("nvlink", "pcie", "none", "unknown")
CHECK_ELEMENTS = 1 << 20  # copies are checked exactly on this many strided elements
NO_GPU = "not measurable here: a CPU job has no GPUs to copy between"
ONE_GPU = ("not measurable here: one GPU ({dev}): no peer to copy to; a pool of GPUs "
           "(device cuda:0+1) measures every pair")


@dataclass
class PeerCopyConfig(ExperimentConfig):
    name: str = NAME
    sizes: list[int] = MISSING  # bytes per copy (one direction)
    methods: list[str] = MISSING
    directions: list[str] = MISSING

    RULES = {"sizes": "sizes", "methods": METHODS, "directions": DIRECTIONS}


Config = PeerCopyConfig


def ordered_pairs(n: int) -> list[tuple[int, int]]:
    """(src, dst) of every ordered pair of n GPUs: n(n-1) of them."""
    return list(permutations(range(n), 2))


def unordered_pairs(n: int) -> list[tuple[int, int]]:
    """(a, b), a < b: n(n-1)/2 of them, each measured once both ways at once."""
    return list(combinations(range(n), 2))


def link_type(peer_access: bool, nvlink: bool | None) -> str:
    """The link a pair's copies take: NVLink where NVML says its P2P works over NVLink; else PCIe
    where peer access works; `none` without peer access; `unknown` when NVML cannot tell."""
    if not peer_access:
        return "none"
    if nvlink is None:
        return "unknown"
    return "nvlink" if nvlink else "pcie"


def copy_bytes(size: int, direction: str) -> int:
    """Bytes that cross the link in one call: both ways count for `bi`."""
    return size * (2 if direction == "bi" else 1)


def _nvml_link(a: int, b: int) -> tuple[bool | None, int | None]:
    """(NVLink P2P status between torch GPUs a and b, active NVLink links of a); None unknown."""
    from experiments.core.device import nvml_handle

    nvml, ha = nvml_handle(a)
    _, hb = nvml_handle(b)
    if ha is None or hb is None:
        return None, None
    try:
        status = nvml.nvmlDeviceGetP2PStatus(ha, hb, nvml.NVML_P2P_CAPS_INDEX_NVLINK)
        nvlink = status == nvml.NVML_P2P_STATUS_OK
    except Exception:  # an old driver or pynvml without the call
        nvlink = None
    active = 0
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            active += nvml.nvmlDeviceGetNvLinkState(ha, link) == nvml.NVML_FEATURE_ENABLED
        except Exception:  # past the device's links, or no NVLink at all
            break
    return nvlink, active


def pair_link(a: torch.device, b: torch.device) -> dict:
    peer = bool(torch.cuda.can_device_access_peer(a, b))
    nvlink, active = _nvml_link(a.index, b.index)
    return {"peer_access": peer, "nvlink_p2p": nvlink, "nvlinks_active": active,
            "link": link_type(peer, nvlink)}


def _random(dev: torch.device, n: int, dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator(device=dev).manual_seed(seed)
    return torch.randn(n, device=dev, dtype=dtype, generator=gen)


def _same(x: torch.Tensor, ref: torch.Tensor) -> bool:
    """Exact equality on strided elements and the last one, compared on the CPU."""
    step = max(1, ref.numel() // CHECK_ELEMENTS)
    return (torch.equal(x[::step].cpu(), ref[::step].cpu())
            and torch.equal(x[-1:].cpu(), ref[-1:].cpu()))


def _copier(method: str):
    """dst <- src by the copy engine (torch launches it on src's current stream) or by the copy
    kernel on the current device (the caller makes it src's)."""
    if method == "copy_engine":
        return lambda src, dst: dst.copy_(src)
    from experiments import kernels

    kernel = kernels.load("sm_copy")
    return lambda src, dst: kernel.copy(src, dst)


def _enable_peer(a: torch.device, b: torch.device):
    """A tiny copy a -> b: torch enables peer access from a's context to b's memory on the first
    one (cudaDeviceEnablePeerAccess), which the copy kernel's stores into b need."""
    torch.empty(1, device=b).copy_(torch.ones(1, device=a))
    torch.cuda.synchronize(a)


def measure(state: State) -> dict:
    ctx, n, (method, direction) = state.ctx, state.row["n"], (state.row["op"], state.row["variant"])
    a, b, link = state.args["a"], state.args["b"], state.args["link"]
    if not link["peer_access"]:
        raise Unsupported(f"no peer access from {a} to {b} (cudaDeviceCanAccessPeer is 0): "
                          "copies between them go through host memory, not a GPU-to-GPU link")
    dt = torch_dtype(ctx.dtype)
    _enable_peer(a, b)
    if direction == "bi":
        _enable_peer(b, a)
    copy = _copier(method)
    x_a = _random(a, n, dt, ctx.settings.seed)
    y_b = torch.full((n,), float("nan"), device=b, dtype=dt)
    if direction == "uni":
        def call(i):
            copy(x_a, y_b)
        checks = [(y_b, x_a)]
    else:
        x_b = _random(b, n, dt, ctx.settings.seed + 1)
        y_a = torch.full((n,), float("nan"), device=a, dtype=dt)
        main = torch.cuda.current_stream(a)
        s_a, s_b = torch.cuda.Stream(a), torch.cuda.Stream(b)

        def call(i):
            # fork from a's stream (the timer's events are on it), a copy per direction, join
            s_a.wait_stream(main)
            s_b.wait_stream(main)
            with torch.cuda.stream(s_a):  # also makes `a` the current device: the kernel runs on a
                copy(x_a, y_b)
            with torch.cuda.stream(s_b):
                copy(x_b, y_a)
            main.wait_stream(s_a)
            main.wait_stream(s_b)
        checks = [(y_b, x_a), (y_a, x_b)]
    with torch.cuda.device(a):
        call(0)
        for dev in (a, b):
            torch.cuda.synchronize(dev)
        for got, ref in checks:
            if not _same(got, ref):
                raise WrongResult(f"{method} {direction} {a}->{b}: copied data differ from "
                                  "the source")
        stats = state.time(call, device=a, use_graph=False)
        for dev in (a, b):
            torch.cuda.synchronize(dev)
    return stats | {"rel_error": 0.0, "check_passed": True}


def _base(method, direction, size, elem) -> dict:
    n = max(1, size // elem)
    nbytes = copy_bytes(n * elem, direction)
    return {"op": method, "variant": direction, "n": n, "bytes": float(nbytes),
            "working_set_bytes": 2 * nbytes}


def not_measurable(cfg: PeerCopyConfig, reason: str, gpus: int) -> list[Point]:
    """One row per (method, direction, size), each `not_applicable` with the reason."""
    elem = 4  # bytes are bytes: the row's sizes read the same whatever the dtype
    return [Point(_base(m, d, s, elem) | {"params": {"gpus": gpus}}, status="not_applicable",
                  message=reason) for m in cfg.methods for d in cfg.directions for s in cfg.sizes]


def points(cfg: PeerCopyConfig, ctx: Context) -> list[Point]:
    """Per method and size, every ordered pair one way and every pair both ways."""
    gpus, why = gpu_group(ctx.devices, NO_GPU, ONE_GPU)
    if why:
        return not_measurable(cfg, why, len(gpus))
    elem = itemsize(ctx.dtype)
    links = {(i, j): pair_link(gpus[i], gpus[j]) for i, j in ordered_pairs(len(gpus))}
    out = []
    for method in cfg.methods:
        for direction in cfg.directions:
            pairs = ordered_pairs(len(gpus)) if direction == "uni" else unordered_pairs(len(gpus))
            for i, j in pairs:
                a, b = gpus[i], gpus[j]
                link = links[(i, j)]
                if direction == "bi":  # both ways at once: peer access must work both ways
                    link = link | {"peer_access": link["peer_access"]
                                   and links[(j, i)]["peer_access"]}
                arrow = "->" if direction == "uni" else "<->"
                params = link | {"src": a.index, "dst": b.index, "gpus": len(gpus),
                                 "pair": f"{a.index}{arrow}{b.index}"}
                out += [Point(_base(method, direction, size, elem) | {"params": params},
                              args={"a": a, "b": b, "link": link}) for size in cfg.sizes]
    return out
