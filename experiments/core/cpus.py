"""CPU lists ('0,4-7') and pinning a process to them. No torch here: a job pins itself before its
heavy imports, so even they run on its own cores (experiments/__main__.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


def parse_cpus(text) -> set[int]:
    """'0,4-7' -> {0, 4, 5, 6, 7}; '' or 'all' -> empty (no pinning). Raises ValueError."""
    cpus: set[int] = set()
    if str(text or "").strip() in ("", "all"):
        return cpus
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        lo, _, hi = part.partition("-")
        lo, hi = int(lo), int(hi or lo)
        if lo < 0 or hi < lo:
            raise ValueError(part)
        cpus |= set(range(lo, hi + 1))
    return cpus


def pin_process(text) -> set[int]:
    """Pin this process to the CPUs of `text` that it may use (a Slurm allocation's may be fewer);
    threads started later inherit it. Returns the CPUs pinned to (empty: not pinned)."""
    try:
        wanted = parse_cpus(text)
    except ValueError:
        return set()  # the job's config check names the bad value
    if not wanted or not hasattr(os, "sched_setaffinity"):
        return set()
    allowed = wanted & set(os.sched_getaffinity(0))
    if allowed:
        os.sched_setaffinity(0, allowed)
    return allowed


# OpenMP's binding variables. With any of them set, libgomp pins the process's first thread to one
# place as torch loads it, and every thread the process starts after inherits that one CPU: a
# sweep run with OMP_PROC_BIND=spread OMP_PLACES=cores exported measures each CPU job on one
# core, a fraction of the machine's rates. rooflab places its own
# threads (its team, one per core; `cpus=` picks them), so a job's process goes without them.
OPENMP_BINDING = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY")


def unbind_openmp(environ=os.environ) -> list[str]:
    """Remove OpenMP's binding variables from `environ` (this process's, which its children
    inherit), before an OpenMP runtime loads; returns 'NAME=value' of each removed."""
    return [f"{name}={environ.pop(name)}" for name in OPENMP_BINDING if name in environ]


def pin_from_argv(argv) -> None:
    """A job's `cpus=...` override, applied before anything else is imported."""
    for arg in argv:
        if arg.startswith("cpus="):
            pin_process(arg.split("=", 1)[1].strip("'\""))


# --- the machine's topology, read from sysfs (a test points `root` at a fake tree) ---------------

SYSFS = "/sys/devices/system"
UNITS = {"K": 1024, "M": 1024**2, "G": 1024**3}


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _size(text: str) -> int:
    """sysfs cache size: '32K', '1024K', '105M' -> bytes."""
    return int(text[:-1]) * UNITS[text[-1]] if text[-1] in UNITS else int(text)


@dataclass(frozen=True)
class Topology:
    """The CPUs this process may use, grouped as the hardware groups them.

    cores: each physical core's usable CPUs (SMT siblings), in CPU order; nodes: NUMA node -> its
    usable CPUs; caches: (level, bytes, CPUs sharing that instance), one entry per cache instance
    (data and unified caches: instruction caches hold no working set)."""

    cores: tuple[tuple[int, ...], ...]
    nodes: dict = field(default_factory=dict)
    caches: tuple = ()

    def team(self, node: int | None = None) -> list[int]:
        """One CPU per physical core (its first sibling), of one NUMA node or of all."""
        keep = set(self.nodes.get(node, ())) if node is not None else None
        return [c[0] for c in self.cores if keep is None or c[0] in keep]

    def cache_sizes(self) -> dict[str, int]:
        """Bytes of one instance of each level ({'L1': 32768, 'L2': ..., 'L3': ...})."""
        out: dict[str, int] = {}
        for level, size, _ in self.caches:
            out[f"L{level}"] = max(out.get(f"L{level}", 0), size)
        return dict(sorted(out.items()))

    def cache_total(self, cpus) -> dict[str, int]:
        """Bytes of each level that threads on `cpus` hold together: the instances they touch
        (private L1/L2 add up over cores; a shared L3 counts once per socket)."""
        cpus, out = set(cpus), {}
        for level, size, shared in self.caches:
            if cpus & set(shared):
                out[f"L{level}"] = out.get(f"L{level}", 0) + size
        return dict(sorted(out.items()))

    def placement(self, cpus) -> dict:
        """What a row records of where its threads ran."""
        cpus = sorted(set(cpus))
        cores = [c for c in self.cores if set(c) & set(cpus)]
        nodes = sorted(n for n, members in self.nodes.items() if set(members) & set(cpus))
        return {"threads": len(cpus), "cores": len(cores),
                "smt": any(len(set(c) & set(cpus)) > 1 for c in cores),
                "numa_nodes": nodes, "cpus": format_cpus(cpus)}


def format_cpus(cpus) -> str:
    """{0, 1, 2, 5} -> '0-2,5' (the inverse of parse_cpus)."""
    out, run = [], []
    for c in sorted(cpus):
        if run and c != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(c)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def read_topology(root: str | Path = SYSFS, allowed=None) -> Topology:
    """The topology of the CPUs in `allowed` (default: this process's affinity), from sysfs.
    Where sysfs says nothing (containers, other OSes) every CPU is its own core on node 0."""
    root = Path(root)
    if allowed is None:
        allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(
            range(os.cpu_count() or 1))
    allowed = set(allowed)
    cores: dict[tuple, None] = {}
    caches: dict[tuple, None] = {}
    for cpu in sorted(allowed):
        base = root / "cpu" / f"cpu{cpu}"
        siblings = _read(base / "topology" / "thread_siblings_list")
        mates = tuple(sorted((parse_cpus(siblings) if siblings else {cpu}) & allowed)) or (cpu,)
        cores.setdefault(mates, None)
        for index in sorted((base / "cache").glob("index*")):
            level, kind, size, shared = (_read(index / f) for f in
                                         ("level", "type", "size", "shared_cpu_list"))
            if level and size and kind != "Instruction":
                caches.setdefault((int(level), _size(size),
                                   tuple(sorted(parse_cpus(shared or str(cpu))))), None)
    nodes: dict[int, tuple] = {}
    for node in sorted((root / "node").glob("node[0-9]*")):
        members = parse_cpus(_read(node / "cpulist") or "") & allowed
        if members:
            nodes[int(node.name[4:])] = tuple(sorted(members))
    return Topology(cores=tuple(sorted(cores)), nodes=nodes or {0: tuple(sorted(allowed))},
                    caches=tuple(sorted(caches)))


def isa_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> set[str]:
    """The CPU's ISA flags as Linux lists them (x86 "flags", ARM "Features"); empty elsewhere."""
    text = _read(Path(cpuinfo)) or ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


# ISA flags of half-precision arithmetic: x86 AVX512-FP16 or AMX-FP16, ARM FP16 (fphp/asimdhp)
HALF_ARITHMETIC = {"avx512_fp16", "amx_fp16", "fphp", "asimdhp"}
# ...and of bfloat16 arithmetic: x86 AVX512-BF16 or AMX-BF16, ARM BF16
BF16_ARITHMETIC = {"avx512_bf16", "amx_bf16", "bf16"}
