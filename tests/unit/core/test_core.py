"""The measurement core: the row schema, atomic writes, config errors, devices and budgets (the
timer: test_timer.py)."""

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ValidationError

from experiments.core.config import ConfigError
from experiments.analysis import dataset
from experiments.core import store
from experiments.core.schema import FORMAT, SCHEMA, finish_row, to_table
from experiments.core.runner import Context, Unsupported

from tests.conftest import compose_job
from experiments.core.device import DeviceError, JobDevice, device_facts


def test_finish_row_derives_rates_and_rejects_unknown_columns():
    row = finish_row({"experiment": "x", "op": "y", "host": "h", "device": "cpu",
                      "device_kind": "cpu", "dtype": "float32", "status": "ok",
                      "flops": 10.0, "bytes": 80.0, "time_s": 2.0, "params": {"a": 1}})
    assert row["intensity"] == 0.125 and row["flop_per_s"] == 5.0 and row["byte_per_s"] == 40.0
    assert row["params"] == '{"a": 1}'
    with pytest.raises(KeyError, match="outside the schema"):
        finish_row({"status": "ok", "speed": 1})
    with pytest.raises(ValueError, match="status"):
        finish_row({"status": "fine"})


def _table():
    row = {"experiment": "x", "op": "y", "host": "h", "device": "cpu", "device_kind": "cpu",
           "dtype": "float32", "status": "ok"}
    return to_table([row], {"run_id": "r1"})


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "a" / "out.parquet"

    def broken_write(table, handle):
        handle.write(b"PAR1 half a file")
        raise KeyboardInterrupt  # as if the job were killed mid-write

    monkeypatch.setattr(store.pq, "write_table", broken_write)
    with pytest.raises(KeyboardInterrupt):
        store.write_atomic(_table(), target)
    assert list(target.parent.iterdir()) == []


def test_written_file_has_schema_and_provenance(tmp_path):
    path = store.write_atomic(_table(), tmp_path / "out.parquet")
    assert pq.read_schema(path).remove_metadata() == SCHEMA
    assert store.read_metadata(path) == {"run_id": "r1"} | FORMAT  # and its format


def test_collect_names_a_corrupt_or_foreign_file(tmp_path):
    good = store.write_atomic(_table(), tmp_path / "good.parquet")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(store.DatasetError, match="bad.parquet"):
        dataset.collect([good, bad])
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), foreign)
    with pytest.raises(store.DatasetError, match="foreign.parquet.*missing columns"):
        dataset.collect([good, foreign])
    assert len(dataset.collect([good, good])) == 1  # one file named twice is read once


@pytest.mark.parametrize("override, message", [
    ("dtype=float13", "float13"),
    ("experiment.sizes=[]", "experiment.sizes is empty"),
    ("experiment.sizes=[1024,-4]", "experiment.sizes has \\[-4\\]"),
    ("device=gpu", "device='gpu'"),
    ("point_budget_s=0", "point_budget_s"),
    ("point_budget_s=nan", "point_budget_s=nan must be a finite number > 0"),
    ("point_budget_s=inf", "point_budget_s=inf must be a finite number > 0"),
    ("cv_threshold=-1", "cv_threshold=-1.0 must be a finite number > 0"),
    ("cv_threshold=nan", "cv_threshold=nan must be a finite number > 0"),
])
def test_bad_config_names_the_key(override, message):
    with pytest.raises((ConfigError, ValueError, ValidationError, ConfigCompositionException),
                       match=message):
        compose_job(["experiment=bandwidth", override])


def test_out_that_cannot_be_written_fails_before_measuring(tmp_path, monkeypatch):
    import experiments.core.device as device

    # the device must not be touched: a bad out= fails while the config is built
    monkeypatch.setattr(device.JobDevice, "resolve", lambda name: pytest.fail("device touched"))
    with pytest.raises(ConfigError, match=f"out='{tmp_path}' is a directory"):
        compose_job(["experiment=bandwidth", "device=cpu", f"out={tmp_path}"])
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="is not a directory"):
        compose_job(["experiment=bandwidth", "device=cpu", f"out={blocker}/x/bw.parquet"])
    # a read-only place (a read-only mount: root may write in a folder chmod'ed read-only)
    with pytest.raises(ConfigError, match="cannot write in /proc"):
        compose_job(["experiment=bandwidth", "device=cpu", "out=/proc/rooflab/bw.parquet"])
    compose_job(["experiment=bandwidth", "device=cpu", f"out={tmp_path}/new/dir/bw.parquet"])
    assert not (tmp_path / "new").exists()  # checking made nothing


def test_unknown_experiment_lists_the_allowed_ones():
    from hydra.errors import MissingConfigException

    with pytest.raises(MissingConfigException) as info:
        compose_job(["experiment=nosuch"])
    assert "nosuch" in str(info.value)
    assert "\tbandwidth" in str(info.value) and "\tmatmul" in str(info.value)


def test_device_resolution():
    assert list(JobDevice.resolve("cpu").devices) == [torch.device("cpu")]
    if not torch.cuda.is_available():
        assert list(JobDevice.resolve("auto").devices) == [torch.device("cpu")]
        with pytest.raises(DeviceError, match="does not exist"):
            list(JobDevice.resolve("cuda:0").devices)
    with pytest.raises(DeviceError, match="allowed"):
        list(JobDevice.resolve("tpu").devices)


def test_cpu_facts_are_read_not_typed():
    facts = device_facts(torch.device("cpu"))
    assert facts.compute_units >= 1 and facts.memory_bytes > 1 << 28
    assert facts.llc_bytes > 0 and facts.name


def test_point_turns_failures_into_status_rows():
    ctx = Context(device=torch.device("cpu"), dtype="float32", facts=device_facts(torch.device("cpu")))
    assert ctx.point({"op": "a"}, lambda: {"time_s": 1.0})["status"] == "ok"

    def unsupported():
        raise Unsupported("no fp8 here")

    def oom():
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 TB")

    def broken():
        raise ZeroDivisionError("boom")

    assert ctx.point({"op": "a"}, unsupported) | {} == {"op": "a", "status": "unsupported", "message": "no fp8 here"}
    assert ctx.point({"op": "a"}, oom)["status"] == "oom"
    assert ctx.point({"op": "a"}, broken)["status"] == "error"


def test_random_data_is_never_zeros():
    ctx = Context(device=torch.device("cpu"), dtype="float32", facts=device_facts(torch.device("cpu")))
    x = ctx.randn(1000)
    assert (x != 0).all() and x.std() > 0.5


def test_defaults_live_in_one_layer_the_yaml():
    """Each key's default is written once, in config/: a dataclass default beside the YAML's
    would be a second, silently disagreeing layer."""
    import dataclasses

    import yaml
    from omegaconf import MISSING

    from experiments import experiment, experiment_names
    from experiments import experiment_config
    from experiments.core.config import CONFIG_DIR, JobConfig

    for name in experiment_names():
        config = experiment(name).Config
        values = yaml.safe_load((CONFIG_DIR / "experiment" / f"{name}.yaml").read_text())
        for f in dataclasses.fields(config):
            if f.name == "name":
                continue
            assert f.default == MISSING and f.default_factory is dataclasses.MISSING, \
                f"{name}.{f.name} has a default in its dataclass"
            assert f.name in values, f"config/experiment/{name}.yaml lacks {f.name}"
        assert isinstance(experiment_config(name), config)  # the YAML alone makes a valid config
    job = yaml.safe_load((CONFIG_DIR / "job.yaml").read_text())
    for f in dataclasses.fields(JobConfig):
        assert f.default == MISSING, f"JobConfig.{f.name} has a default in its dataclass"
        assert f.name == "experiment" or f.name in job, f"config/job.yaml lacks {f.name}"


def test_a_context_given_no_settings_measures_by_the_jobs_rules():
    """place() and tests build a Context without Hydra: it must measure as a job does."""
    import dataclasses

    from experiments.core.config import Settings, job_defaults
    ctx = Context(device=torch.device("cpu"), dtype="float32",
                  facts=device_facts(torch.device("cpu")))
    job = job_defaults()
    SETTINGS = [f.name for f in dataclasses.fields(Settings)]
    assert dataclasses.asdict(ctx.settings) == {k: job[k] for k in SETTINGS}
    assert ctx.settings.precision > 0 and ctx.settings.min_point_s > 0  # not the whole budget
    with pytest.raises(dataclasses.FrozenInstanceError):  # read once: nobody changes them
        ctx.settings.point_budget_s = 1.0
    # and config.yaml's per-kind `job:` may set each of them: the schema lists every one
    import yaml
    from tests.conftest import ROOT
    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    assert set(schema["definitions"]["job_settings"]["properties"]) == set(SETTINGS)


def test_a_points_budget_is_the_jobs_raised_or_capped_in_one_place():
    from types import SimpleNamespace
    from experiments.core.budget import samples_within
    from experiments.core.config import Settings
    from experiments.core.harness import Point, budget_s
    ctx = SimpleNamespace(settings=Settings.defaults().but(point_budget_s=0.4))
    assert budget_s(Point({}), ctx) == 0.4
    assert budget_s(Point({}, least_s=1.5), ctx) == 1.5
    assert budget_s(Point({}, least_s=0.1), ctx) == 0.4
    assert budget_s(Point({}, most_s=0.15), ctx) == 0.15
    assert budget_s(Point({}, most_s=1.0), ctx) == 0.4
    assert samples_within(0.4, 0.025, at_least=5, at_most=100) == 16
    assert samples_within(0.4, 0.1, at_least=5, at_most=100) == 5  # 4 fit: at least 5
    assert samples_within(0.4, 0.0, at_least=5, at_most=100) == 100


def _budget_literals_and_sums(path):
    """Where `path` gives point_budget_s (or any *budget* name) a number, or computes with a
    `.point_budget_s` (min, max, arithmetic)."""
    import ast

    def number(node):
        return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
            and not isinstance(node.value, bool)

    def budget_attr(node):
        return isinstance(node, ast.Attribute) and node.attr == "point_budget_s"

    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        named = []  # (name, value) pairs the code binds
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            named += [(getattr(t, "id", getattr(t, "attr", "")), node.value) for t in targets]
        elif isinstance(node, ast.keyword) and node.arg:
            named.append((node.arg, node.value))
        elif isinstance(node, ast.Dict):
            named += [(k.value, v) for k, v in zip(node.keys, node.values)
                      if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        elif isinstance(node, ast.arguments):
            args = node.posonlyargs + node.args
            named += list(zip([a.arg for a in args[len(args) - len(node.defaults):]],
                              node.defaults))
            named += [(a.arg, d) for a, d in zip(node.kwonlyargs, node.kw_defaults) if d]
        found += [f"{path.name}:{v.lineno} {n} = {v.value}" for n, v in named
                  if "budget" in str(n).lower() and number(v)]
        computed = (isinstance(node, ast.BinOp) and (budget_attr(node.left)
                                                     or budget_attr(node.right))) or (
            isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("min", "max")
            and any(budget_attr(a) for a in node.args))
        if computed:
            found.append(f"{path.name}:{node.lineno} computes with .point_budget_s")
    return found


def test_the_point_budget_has_one_default_and_one_home():
    """config/job.yaml holds point_budget_s's one default: no code gives a budget a number, and
    a point's own budget (longer, capped) is computed by the harness alone (core/harness.py
    budget_s), from the bounds the experiment gives its points; core/budget.py derives user code's
    time limit from it."""
    import yaml
    from tests.conftest import ROOT
    from experiments.core import budget, harness
    homes = {Path(m.__file__).resolve() for m in (harness, budget)}
    found = [f for p in sorted((ROOT / "experiments").rglob("*.py")) if p.resolve() not in homes
             for f in _budget_literals_and_sums(p)]
    assert not found, found
    configs = [p for p in (ROOT / "config").rglob("*.yaml")
               if p.parent.name == "experiment" or p.name == "job.yaml"]
    given = [p.name for p in configs if "point_budget_s" in (yaml.safe_load(p.read_text()) or {})]
    assert given == ["job.yaml"]


def test_rotation_copies_span_the_llc_within_their_bounds():
    from experiments.core.budget import rotation_copies
    assert rotation_copies(1e6, 32e6, 2.0, at_most=16) == 16  # 64 wanted, capped
    assert rotation_copies(1e6, 32e6, 2.0, at_most=100) == 64
    assert rotation_copies(1e9, 32e6, 2.0, at_most=16, at_least=2) == 2
    assert rotation_copies(1e6, 32e6, 2.0, at_most=100, free_bytes=20e6) == 10  # half the free
    assert rotation_copies(1e9, 32e6, 2.0, at_most=16, free_bytes=1e6) == 1  # never fewer than 1


def _gemm_row(n, gflops):
    """A clean GEMM row of size n at `gflops` GFLOP/s, as the slow-point guard learns from it."""
    return {"status": "ok", "flops": 2.0 * n**3, "bytes": 6.0 * n * n,
            "time_s": 2.0 * n**3 / (gflops * 1e9)}


def test_the_slow_point_guard_skips_by_the_best_rates_so_far():
    from experiments.core.budget import SlowPointGuard
    guard = SlowPointGuard(max_call_s=1.0)
    assert guard.skip(1e12, 1e9) is None  # nothing measured yet: no prediction
    guard.update({"status": "ok", "flops": 1e9, "bytes": 1e6, "time_s": 1e-3})  # 1 TFLOP/s
    assert guard.skip(0.5e12, 1e6) is None
    skipped = guard.skip(2e12, 1e6)
    assert skipped["status"] == "skipped" and "max_call_s=1.0" in skipped["message"]
    guard.update({"status": "error", "flops": 1e9, "bytes": 1e6, "time_s": 1e-9})  # not learnt
    assert guard.skip(2e12, 1e6) is not None


def test_the_slow_point_guard_scales_by_the_last_points_shortfall():
    """A rate that falls with size (an emulated dtype out of cache) predicts from the last point,
    not from the small size's best, and from its fall: the Zen 1 VM's bfloat16 GEMM, 1.78 GFLOP/s
    at n = 256, 1.02 at 512, skips 1024 (predicted 3.7 s; the best rate alone said 1.2 s, the
    last shortfall alone 2.1 s, and it took 3.2)."""
    from experiments.core.budget import SlowPointGuard

    guard = SlowPointGuard(max_call_s=1.5)
    guard.update(_gemm_row(256, 1.78))
    assert guard.skip(2.0 * 1024**3, 6.0 * 1024**2) is None  # 1.2 s at the best rate
    guard.update(_gemm_row(512, 1.02))
    skipped = guard.skip(2.0 * 1024**3, 6.0 * 1024**2)
    assert skipped is not None and "predicted 3.7 s" in skipped["message"]
    # rising rates (a GEMM climbing to its roof) predict as before: no shortfall
    rising = SlowPointGuard(max_call_s=1.5)
    for n, rate in ((256, 50.0), (512, 60.0), (1024, 65.0)):
        rising.update(_gemm_row(n, rate))
    assert rising.shortfall == 1.0
    assert rising.skip(2.0 * 2048**3, 6.0 * 2048**2) is None  # 0.26 s
    # a contended point's slowness is not its size's: it moves no shortfall
    guard.update(_gemm_row(512, 1.78) | {"time_s": 10.0, "contended": True})
    assert guard.shortfall == pytest.approx(1.78 / 1.02)  # 512's, unchanged
    assert guard.growth == pytest.approx(1.78 / 1.02)


def test_the_slow_point_guard_follows_a_rate_still_falling():
    """The shortfall's growth from one size to the next scales the next prediction: the Zen 1
    VM's bfloat16 GEMM on 2026-12-05 read 1.89 GFLOP/s at 256 and 1.47 at 512; the last shortfall
    alone predicted 1024 at 1.46 s, under max_call_s (1.5), and 1024 took 3.1 s a call (0.70
    GFLOP/s), 18 s of the sweep. A rate that rises again resets the growth."""
    from experiments.core.budget import SlowPointGuard

    n1024 = (2.0 * 1024**3, 6.0 * 1024**2)
    guard = SlowPointGuard(max_call_s=1.5)
    guard.update(_gemm_row(256, 1.89))
    guard.update(_gemm_row(512, 1.47))
    assert guard.shortfall * 2.0 * 1024**3 / 1.89e9 == pytest.approx(1.46, abs=0.01)  # ran, before
    skipped = guard.skip(*n1024)
    assert skipped is not None and "predicted 1.9 s" in skipped["message"]
    # a dip then a new best (the VM's float32 GEMM: 64.2, 46.6, 66.3 at 256-1024): no growth left
    dipped = SlowPointGuard(max_call_s=1.5)
    for n, rate in ((256, 64.2), (512, 46.6)):
        dipped.update(_gemm_row(n, rate))
    assert dipped.growth == pytest.approx(64.2 / 46.6)
    dipped.update(_gemm_row(1024, 66.3))
    assert dipped.shortfall == 1.0 and dipped.growth == 1.0
    assert dipped.skip(2.0 * 2048**3, 6.0 * 2048**2) is None  # 0.26 s
    # a rate falling by the same share twice grows no further than one step's fall
    steady = SlowPointGuard(max_call_s=100.0)
    for n, rate in ((256, 2.0), (512, 1.0), (1024, 0.5)):
        steady.update(_gemm_row(n, rate))
    assert steady.shortfall == pytest.approx(4.0) and steady.growth == pytest.approx(2.0)


def test_the_code_hash_follows_the_files_not_where_they_lie(tmp_path):
    """Two copies of one tree hash alike; a changed byte, a renamed file hash apart; bytecode
    caches are left out."""
    from experiments.core.provenance import code_hash, tree_hash

    for copy in ("a", "b"):
        (tmp_path / copy / "sub").mkdir(parents=True)
        (tmp_path / copy / "sub" / "m.py").write_text("x = 1\n")
        (tmp_path / copy / "B.py").write_text("y = 2\n")
    (tmp_path / "b" / "__pycache__").mkdir()
    (tmp_path / "b" / "__pycache__" / "m.pyc").write_bytes(b"\x00\x01")
    same = tree_hash(tmp_path / "a")
    assert tree_hash(tmp_path / "b") == same
    (tmp_path / "b" / "sub" / "m.py").write_text("x = 2\n")
    assert tree_hash(tmp_path / "b") != same
    (tmp_path / "a" / "B.py").rename(tmp_path / "a" / "C.py")
    assert tree_hash(tmp_path / "a") != same
    assert len(code_hash()) == 16 and code_hash() == code_hash()
