"""The house's layout rules, read from the source (nothing is imported, so this runs in a blink):
no import circle among experiments' modules, no import up docs/layout.md's floors, no private
name across rooms, no Python file over 400 lines, and experiments/' top holds the experiment
modules only."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "experiments"
MAX_LINES = 400
# Files other helpers are splitting right now (issue 18): the lead removes each entry once its
# split is merged. Nothing else may be added here.
BEING_SPLIT: set[str] = set()
# What an experiment module defines (experiments/__init__.py's registry and the runner use them).
EXPERIMENT_API = {"NAME", "DESCRIPTION", "Config", "points", "measure"}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(p, package.parent): p for p in sorted(package.rglob("*.py"))}


def imported(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The package's modules `path` imports: at its top and inside functions, relative or not.
    `from a import b` counts as importing a.b where that is a module, else a."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:  # `import a.b.c` of a name inside a module: the module
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def is_experiment(path: Path) -> bool:
    return path.parent == PACKAGE and not path.name.startswith("_")


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    known = modules(package)
    graph = {name: imported(path, name, known) for name, path in known.items()}
    # experiments/__init__.py loads every experiment by name (importlib): it imports them all
    graph[package.name] |= {n for n, p in known.items() if is_experiment(p)}
    return graph


def circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `graph` (a -> b -> ... -> a), or None."""
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        return exc.args[1]
    return None


def test_the_circle_check_finds_a_circle():
    assert circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) is not None
    assert circle({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a"}}) is None


def test_imports_inside_functions_and_relative_ones_are_edges(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "low.py").write_text("def f():\n    from pkg import high\n")
    (pkg / "high.py").write_text("from .sub.low import f\n")
    graph = import_graph(pkg)
    assert graph["pkg.sub.low"] == {"pkg.high"} and graph["pkg.high"] == {"pkg.sub.low"}
    assert circle(graph) is not None


def test_no_import_circle():
    found = circle(import_graph())
    assert found is None, "import circle: " + " -> ".join(reversed(found))


def reached(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for t in graph.get(todo.pop(), ()):
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return seen


def in_room(module: str, room: str) -> bool:
    return module == room or module.startswith(room + ".")


def reaching_up(graph: dict[str, set[str]], low: str, high: str,
                entry: str | None = None) -> dict[str, set[str]]:
    """The modules of room `low` that import room `high`: directly (any of them), or through
    other modules (all but `entry`, the room's command line, which runs what sits above it)."""
    out = {}
    for name, direct in graph.items():
        if not in_room(name, low):
            continue
        found = {t for t in (direct if name == entry else reached(graph, name))
                 if in_room(t, high)}
        if found:
            out[name] = found
    return out


def planted(root: Path, name: str, rooms: tuple[str, ...], files: dict[str, str]) -> Path:
    """A package `name` under `root` with these rooms (subpackages) and files: a layout check's
    test case."""
    pkg = root / name
    for room in rooms:
        (pkg / room).mkdir(parents=True)
        (pkg / room / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    for path, text in files.items():
        (pkg / path).write_text(text)
    return pkg


def test_the_layer_check_finds_an_import_up(tmp_path):
    pkg = planted(tmp_path, "pkg", ("low", "high", "steps"), {
        "high/page.py": "from pkg.low import calc\n", "low/calc.py": "def f():\n    return 1\n",
        "steps/run.py": "from pkg.high import page\n",
        "low/__main__.py": "from pkg.steps import run\n"})
    graph = import_graph(pkg)
    assert not reaching_up(graph, "pkg.low", "pkg.high", entry="pkg.low.__main__")
    assert reaching_up(graph, "pkg.low", "pkg.high") == {"pkg.low.__main__": {"pkg.high.page"}}
    (pkg / "low" / "calc.py").write_text("def f():\n    from pkg.steps import run\n")
    assert reaching_up(graph := import_graph(pkg), "pkg.low", "pkg.high",
                       entry="pkg.low.__main__") == {"pkg.low.calc": {"pkg.high.page"}}
    (pkg / "low" / "__main__.py").write_text("def main():\n    from pkg.high import page\n")
    assert "pkg.low.__main__" in reaching_up(import_graph(pkg), "pkg.low", "pkg.high",
                                             entry="pkg.low.__main__")


def test_analysis_never_imports_report():
    """analysis sits below report: no module of it imports experiments.report, at its top or
    inside a function, nor reaches it through another module."""
    up = reaching_up(import_graph(), "experiments.analysis", "experiments.report")
    assert not up, "analysis imports report: " + "; ".join(
        f"{name} -> {', '.join(sorted(found))}" for name, found in sorted(up.items()))


# docs/layout.md's floors, lowest first: a module imports from its own floor and those below.
# EXPERIMENTS: the experiment modules at the package's top and the package itself (their list).
EXPERIMENTS = "<experiment modules>"
FLOORS = (("core",), ("kernels", "placement", "models"), (EXPERIMENTS,), ("analysis",),
          ("report",), ("steps",), ("cli", "sweep"))
# A command's `__main__` first hands its process to the run's fork server, if there is one.
ENTRY = "experiments.sweep.forkserver"


def floor(name: str, package: Path = PACKAGE) -> int:
    parts = name.split(".")
    if parts == [package.name, "__main__"]:  # `python -m experiments`: every command's name
        return len(FLOORS)
    room = parts[1] if len(parts) > 1 and (package / parts[1]).is_dir() else EXPERIMENTS
    return next(i for i, rooms in enumerate(FLOORS) if room in rooms)


def upward(graph: dict[str, set[str]], package: Path = PACKAGE) -> list[str]:
    """Every import from a lower floor to a higher one ("a -> b")."""
    return [f"{name} -> {t}" for name, targets in sorted(graph.items()) for t in sorted(targets)
            if floor(t, package) > floor(name, package)
            and not (name.endswith(".__main__") and t == ENTRY)]


def test_no_import_points_up_a_floor():
    assert not upward(import_graph()), upward(import_graph())


def test_the_floor_check_finds_an_import_up(tmp_path):
    pkg = planted(tmp_path, "experiments", ("core", "analysis", "report", "sweep"), {
        "core/calc.py": "def f():\n    return 1\n",
        "sweep/forkserver.py": "def delegate(m):\n    pass\n",
        "report/page.py": "from experiments.core import calc\n",
        "analysis/__main__.py": "from experiments.sweep import forkserver\n"})
    assert not upward(import_graph(pkg), pkg)
    (pkg / "analysis" / "fit.py").write_text("def f():\n    from experiments.report import page\n")
    assert upward(import_graph(pkg), pkg) == ["experiments.analysis.fit -> experiments.report.page"]


def private_imports(package: Path = PACKAGE) -> list[str]:
    """`from experiments.ROOM.mod import _name` in a module of another room."""
    out = []
    for name, path in modules(package).items():
        room = name.split(".")[1] if name.count(".") else ""
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").count("."):
                target_room = node.module.split(".")[1]
                out += [f"{name} imports {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")
                        and target_room != room]
    return out


def test_no_private_name_crosses_rooms(tmp_path):
    assert not private_imports(), private_imports()
    pkg = planted(tmp_path, "experiments", ("core", "sweep"), {
        "core/a.py": "def _hidden():\n    pass\n",
        "sweep/b.py": "from experiments.core.a import _hidden\n"})
    assert private_imports(pkg) == ["experiments.sweep.b imports experiments.core.a._hidden"]


def test_no_python_file_over_400_lines():
    files = sorted((ROOT / "experiments").rglob("*.py")) + sorted((ROOT / "tests").rglob("*.py"))
    long = {str(p.relative_to(ROOT)): n for p in files
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not set(long) - BEING_SPLIT, f"over {MAX_LINES} lines: {long}"


@pytest.mark.parametrize("path", sorted(p for p in PACKAGE.glob("*.py") if is_experiment(p)),
                         ids=lambda p: p.stem)
def test_the_top_of_experiments_holds_experiments_only(path):
    tree = ast.parse(path.read_text(), str(path))
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    defined |= {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                if isinstance(t, ast.Name)}
    missing = EXPERIMENT_API - defined
    assert not missing, (f"{path.name} sits at experiments/' top but is no experiment (no "
                         f"{sorted(missing)}): move it to the room for what it does")
    name = next(n.value.value for n in tree.body if isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "NAME" for t in n.targets))
    assert name == path.stem, f"{path.name}: NAME={name!r}, the file's name is the experiment's"
    assert (ROOT / "config" / "experiment" / f"{path.stem}.yaml").is_file()
