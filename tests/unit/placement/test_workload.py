"""Placing a callable: FLOPs and bytes from the definition, the check, the CLI, a user's file,
every bad input as a row, the ncu parser, the sweep's `workloads:` validation and jobs."""

import json
import os
import subprocess
import sys
import textwrap

import pandas as pd
import pytest
import torch

from experiments.placement import counting, ncu
from experiments.cli import place
from experiments.core.config import ConfigError
from experiments.sweep.checks import check_sweep, check_workloads
from experiments.models import make_attention_decode, make_mlp

from tests.conftest import wait_for
from tests.workflow_copy import ROOT

B, D, H = 8, 16, 48


def _mlp_counts(b, d, h, size=4):
    flops = 2 * b * d * h + 2 * b * h * d + b * h  # two GEMMs (bias in addmm) and the GELU
    weights = (d * h + h + h * d + d) * size
    return flops, b * d * size + weights + b * d * size


def _ceilings(system, device_name, B=1e10, P=1e11, latency=1e-6):
    rows = [("dram_bw", None, B), ("matrix_flops", "float32", P), ("latency_eager", None, latency),
            ("latency_graph", None, latency)]
    return pd.DataFrame([{"source": "run", "host": "h", "device": "cpu", "device_name": device_name,
                          "system": system, "ceiling": c, "dtype": dt, "value": v,
                          "ci_low": v, "ci_high": v, "capacity_bytes": None} for c, dt, v in rows])


def test_place_counts_mlp_from_its_definition():
    gen = torch.Generator().manual_seed(0)
    fn, args = make_mlp(B, torch.float32, "cpu", gen, d_model=D, hidden=H)
    row = place.place(fn, *args, device="cpu", point_budget_s=0.02, ceilings=pd.DataFrame())
    flops, nbytes = _mlp_counts(B, D, H)
    assert row["status"] == "ok", row.get("message")
    assert row["flops"] == flops and row["bytes"] == nbytes
    assert row["params"]["param_bytes"] == (D * H + H + H * D + D) * 4
    assert row["check_passed"] and row["params"]["check"] == "float64" and row["rel_error"] < 1e-5
    assert row["time_s"] > 0 and row["timer"] == "perf_counter"
    assert "no fitted roofline for cpu" in row["placement_note"]
    # with ceilings of this device: placed, and the prediction is max(latency, bytes/B, FLOPs/P)
    from experiments.core.device import device_facts
    name = device_facts(torch.device("cpu")).name
    row = place.place(fn, *args, device="cpu", point_budget_s=0.02,
                      ceilings=_ceilings("cpu @ h", name, B=1e3))  # 1 kB/s: memory-bound
    assert row["system"] == "cpu @ h" and row["bound"] == "memory"
    # summed over the ops, each at its own bytes in and out (no cache windows here: DRAM)
    assert row["predicted_from"] == ("sum over 3 ops (3 distinct); outside calibration: "
                                     "aten::gelu not calibrated")  # no op rates here
    assert row["predicted_time_s"] == pytest.approx(row["params"]["op_bytes"] / 1e3)
    assert row["params"]["op_bytes"] > nbytes  # activations in and out of each op
    assert row["model_error"] == pytest.approx(row["time_s"] / row["predicted_time_s"] - 1)


def test_closure_weights_are_counted_and_cpu_attention_flops_too():
    w = torch.randn(D, H)
    row = place.place(lambda x: x @ w, torch.randn(B, D), point_budget_s=0.02,
                      ceilings=pd.DataFrame())
    assert row["flops"] == 2 * B * D * H and row["bytes"] == (B * D + D * H + B * H) * 4
    gen = torch.Generator().manual_seed(0)
    fn, args = make_attention_decode(2, torch.float32, "cpu", gen, heads=2, context=32,
                                     head_dim=8)
    flops, _ = counting.count_flops(fn, args)
    assert flops == 4 * 2 * 2 * 32 * 8  # QK^T and PV: 2 x 2 FLOPs per (query, key, channel)


def test_workload_experiment_rows(run_experiment):
    rows = run_experiment("workload", "float32", [
        "experiment.workload=mlp", "experiment.batches=[1,4]", "experiment.max_call_s=10",
        f"++experiment.kwargs={{d_model: {D}, hidden: {H}}}"])
    assert list(rows.status) == ["ok", "ok"] and list(rows.op) == ["mlp", "mlp"]
    for _, r in rows.iterrows():
        p = json.loads(r.params)
        assert r.flops == _mlp_counts(r.batch, D, H)[0] and r.bytes == _mlp_counts(r.batch, D, H)[1]
        assert p["flop_counter"] == "FlopCounterMode + formulas" and p["bytes_counted"] == "compulsory"
        assert p["target"] == "experiments.models:make_mlp" and p["kwargs"]["d_model"] == D
        assert p["copies"] >= 1 and r.experiment == "workload"


USER = textwrap.dedent('''
    import torch
    def make_double(batch, dtype, device, generator, n=8):
        w = torch.randn(n, n, generator=generator).to(device, dtype)
        return (lambda x: x @ w @ w), (torch.randn(batch, n, generator=generator).to(device, dtype),)
    def make_raises(batch, dtype, device, generator):
        def fn(x):
            raise RuntimeError("boom in the user's code")
        return fn, (torch.randn(batch, 4),)
    def make_no_tensor(batch, dtype, device, generator):
        return (lambda x: float(x.sum())), (torch.randn(batch, 4),)
    def make_no_flops(batch, dtype, device, generator):
        return (lambda x: x + 1), (torch.randn(batch, 4),)
''')


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(USER)
    return path


def test_user_file_target(run_experiment, user_file):
    rows = run_experiment("workload", "float32", [f"experiment.target='{user_file}:make_double'",
                                                  "experiment.batches=[2]"])
    assert rows.status.tolist() == ["ok"] and rows.flops.iloc[0] == 2 * (2 * 2 * 8 * 8)


@pytest.mark.parametrize("target, status, words", [
    ("no_such_module_xyz:make_x", "error", "cannot import 'no_such_module_xyz'"),
    ("experiments.models:make_mpl", "error", "has no 'make_mpl'"),
    ("{file}:make_raises", "error", "boom in the user's code"),
    ("{file}:make_no_tensor", "error", "no tensor"),
])
def test_bad_targets_become_rows(run_experiment, user_file, target, status, words):
    rows = run_experiment("workload", "float32", [
        f"experiment.target='{target.format(file=user_file)}'", "experiment.batches=[1,2]"])
    assert rows.status.tolist() == [status, status]  # each point says why; the job goes on
    assert all(words in m for m in rows.message)


def _cli(*args, timeout=300):
    env = os.environ | {"PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    return subprocess.run([sys.executable, "-m", "experiments", "place", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=env)


NCU_CSV = '''==PROF== Connected to process 4242 (/usr/bin/python3)
==PROF== Profiling "ampere_sgemm_128x64_tn" - 0: 0%....50%....100% - 1 pass
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","python3","127.0.0.1","ampere_sgemm_128x64_tn","1","7","(128, 1, 1)","(64, 2, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","1,048,576"
"0","4242","python3","127.0.0.1","ampere_sgemm_128x64_tn","1","7","(128, 1, 1)","(64, 2, 1)","0","9.0","Command line profiler metrics","dram__bytes_write.sum","Kbyte","32.77"
"0","4242","python3","127.0.0.1","ampere_sgemm_128x64_tn","1","7","(128, 1, 1)","(64, 2, 1)","0","9.0","Command line profiler metrics","l1tex__t_bytes.sum","Mbyte","4.19"
"0","4242","python3","127.0.0.1","ampere_sgemm_128x64_tn","1","7","(128, 1, 1)","(64, 2, 1)","0","9.0","Command line profiler metrics","lts__t_bytes.sum","byte","2097152"
"1","4242","python3","127.0.0.1","void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>","1","7","(128, 1, 1)","(512, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","0"
"1","4242","python3","127.0.0.1","void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>","1","7","(128, 1, 1)","(512, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_write.sum","byte","n/a"
==PROF== Disconnected from process 4242
'''


def test_ncu_csv_parser():
    k = ncu.parse_ncu_csv(NCU_CSV)
    assert k.id.tolist() == [0, 1] and k.kernel.iloc[0] == "ampere_sgemm_128x64_tn"
    first = k.iloc[0]
    assert first["dram__bytes_read.sum"] == 1048576 and first["dram__bytes_write.sum"] == pytest.approx(32770)
    assert first["l1tex__t_bytes.sum"] == pytest.approx(4.19e6) and first["lts__t_bytes.sum"] == 2097152
    assert k.iloc[1]["dram__bytes_read.sum"] == 0 and pd.isna(k.iloc[1]["dram__bytes_write.sum"])
    assert pd.isna(k.iloc[1]["lts__t_bytes.sum"])  # not reported: missing, never 0
    with pytest.raises(ValueError, match="no ncu CSV header"):
        ncu.parse_ncu_csv("==PROF== error: no kernels were profiled\n")


def test_workloads_config_is_checked_before_any_job():
    good = {"mlp": {"target": "experiments.models:make_mlp", "dtypes": ["float32"],
                    "cpu": {"batches": [1, 2], "kwargs": {"d_model": 8}}}}
    check_workloads(good)
    with pytest.raises(ConfigError, match=r"workloads.mlp.target.*has no 'make_mpl'"):
        check_workloads({"mlp": good["mlp"] | {"target": "experiments.models:make_mpl"}})
    with pytest.raises(ConfigError, match=r"workloads.mlp.target.*cannot import"):
        check_workloads({"mlp": good["mlp"] | {"target": "experimnts.workloads:make_mlp"}})
    with pytest.raises(ConfigError, match="not a factory"):
        check_workloads({"mlp": good["mlp"] | {"target": "torch.nn.functional:relu"}})
    with pytest.raises(ConfigError, match=r"workloads.mlp.cuda: unknown key 'batch'"):
        check_workloads({"mlp": good["mlp"] | {"cuda": {"batch": [1]}}})
    with pytest.raises(ConfigError, match=r"workloads.mlp.cpu.*batches"):
        check_workloads({"mlp": good["mlp"] | {"cpu": {"batches": [0]}}})
    # a kwargs key travels as a Hydra override key: refused here, not in the job
    with pytest.raises(ConfigError, match=r"workloads.mlp.cpu.kwargs: key 'a b}: {c' is not"):
        check_workloads({"mlp": good["mlp"] | {"cpu": {"kwargs": {"a b}: {c": 1}}}})
    with pytest.raises(ConfigError, match="list your callables there"):
        check_sweep({"workload": {"dtypes": ["float32"]}})


def test_default_workloads_import():
    import yaml
    check_workloads(yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["workloads"])


NCU_NVTX_CSV = '''"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","python3","h","aten::addmm|[[64], [64, 256], [256, 1024]]/nvjet_sm90_tst_128x64_64x8_2x1_v_bz_bias_TNT","1","7","(128, 1, 1)","(64, 2, 1)","0","9.0","m","dram__bytes_read.sum","byte","1000"
"0","1","python3","h","aten::addmm|[[64], [64, 256], [256, 1024]]/nvjet_sm90_tst_128x64_64x8_2x1_v_bz_bias_TNT","1","7","(128, 1, 1)","(64, 2, 1)","0","9.0","m","dram__bytes_write.sum","byte","24"
"0","1","python3","h","aten::addmm|[[64], [64, 256], [256, 1024]]/nvjet_sm90_tst_128x64_64x8_2x1_v_bz_bias_TNT","1","7","(128, 1, 1)","(64, 2, 1)","0","9.0","m","lts__t_bytes.sum","byte","2000"
"0","1","python3","h","aten::addmm|[[64], [64, 256], [256, 1024]]/nvjet_sm90_tst_128x64_64x8_2x1_v_bz_bias_TNT","1","7","(128, 1, 1)","(64, 2, 1)","0","9.0","m","l1tex__t_bytes.sum","byte","4000"
"1","1","python3","h","aten::addmm|[[64], [64, 256], [256, 1024]]/nvjet_sm90_tst_128x64_64x8_2x1_v_bz_bias_TNT","1","7","(128, 1, 1)","(64, 2, 1)","0","9.0","m","dram__bytes_read.sum","byte","10"
"1","1","python3","h","aten::addmm|[[64], [64, 256], [256, 1024]]/nvjet_sm90_tst_128x64_64x8_2x1_v_bz_bias_TNT","1","7","(128, 1, 1)","(64, 2, 1)","0","9.0","m","dram__bytes_write.sum","byte","0"
"1","1","python3","h","aten::addmm|[[64], [64, 256], [256, 1024]]/nvjet_sm90_tst_128x64_64x8_2x1_v_bz_bias_TNT","1","7","(128, 1, 1)","(64, 2, 1)","0","9.0","m","lts__t_bytes.sum","byte","20"
"1","1","python3","h","aten::addmm|[[64], [64, 256], [256, 1024]]/nvjet_sm90_tst_128x64_64x8_2x1_v_bz_bias_TNT","1","7","(128, 1, 1)","(64, 2, 1)","0","9.0","m","l1tex__t_bytes.sum","byte","40"
"2","1","python3","h","void at::native::elementwise_kernel<128>","1","7","(128, 1, 1)","(64, 2, 1)","0","9.0","m","dram__bytes_read.sum","byte","5"
'''


def test_ncu_kernels_join_the_ops_that_launched_them():
    by_op = ncu.ncu_by_op(ncu.parse_ncu_csv(NCU_NVTX_CSV)).set_index("op")
    mm = by_op.loc["aten::addmm"]
    assert mm.input_shapes == "[[64], [64, 256], [256, 1024]]" and mm.kernels == 2
    assert (mm.dram_bytes, mm.l2_bytes, mm.l1_bytes) == (1034, 2020, 4040)
    # a kernel outside every range keeps its own name; a metric ncu did not report stays missing
    other = by_op.loc["void at::native::elementwise_kernel<128>"]
    assert other.kernels == 1 and pd.isna(other.dram_bytes)


def test_profiled_batches_add_op_rows_that_sum_to_the_call(run_experiment):
    rows = run_experiment("workload", "float32", [
        "experiment.workload=mlp", "experiment.batches=[1,4]", "experiment.max_call_s=10",
        "experiment.profile_batches=[4]", "experiment.ncu_batches=[4]",
        f"++experiment.kwargs={{d_model: {D}, hidden: {H}}}"])
    whole = rows[rows.variant.isna() | (rows.variant == "")]
    ops = rows[rows.variant == "aten_op"]
    assert list(whole.batch) == [1, 4] and (ops.batch == 4).all() and (ops.status == "ok").all()
    params = ops.params.map(json.loads)
    names = {p["aten_op"] for p in params}
    assert {"aten::addmm", "aten::gelu"} <= names or {"aten::mm", "aten::gelu"} <= names, names
    # the GEMMs' counted FLOPs add up to the whole call's FlopCounterMode count
    assert ops.flops.sum() == pytest.approx(whole[whole.batch == 4].flops.iloc[0])
    assert (ops.timer == "torch_profiler").all() and (ops.time_s > 0).all()
    assert all(p["bytes_source"] == "counted" for p in params)  # no ncu on a CPU
    assert "GPU kernels" in json.loads(whole[whole.batch == 4].params.iloc[0])["ncu"]


def test_profile_batches_must_be_measured_batches():
    from experiments import experiment_config
    from experiments.core.config import ConfigError

    with pytest.raises(ConfigError, match="profile_batches"):
        experiment_config("workload", batches=[1, 8], profile_batches=[4])
    with pytest.raises(ConfigError, match="ncu_batches"):
        experiment_config("workload", batches=[1, 8], profile_batches=[1], ncu_batches=[8])


def test_cli_help_documents_every_option_before_importing_torch():
    run = _cli("--help", timeout=60)
    assert run.returncode == 0 and "make_xxx(batch, dtype, device, generator, **kwargs)" in run.stdout
    from experiments.cli.place import parse_args  # every option has its help text
    p = parse_args.__globals__["_Parser"]
    assert run.stdout.count("--") >= 12 and "(default" in run.stdout
    # the parser runs before torch (a second on a 2-core VM): what makes --help quick, not timed
    check = subprocess.run([sys.executable, "-c", "import sys; from experiments.cli import place; "
                            "print('torch' in sys.modules)"], cwd=ROOT, capture_output=True,
                           text=True)
    assert check.stdout.strip() == "False", check.stderr


@pytest.mark.parametrize("args, words", [
    (["--dtype", "bfloat61"], "invalid choice: 'bfloat61'"),
    (["--kwargs", "{d:1}"], "--kwargs: not JSON"),
    (["--kwargs", "[1]"], "give a JSON object"),
    (["--device", "gpu"], "give auto, cpu, cuda or cuda:N"),
    (["--batch", "0"], "must be > 0"),
])
def test_cli_bad_arguments_get_one_line(args, words):
    run = _cli("experiments.models:make_mlp", *args, timeout=60)
    assert run.returncode == 2 and words in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "full_key" not in run.stderr


def test_timing_warnings_carry_the_numbers():
    from experiments.cli.place_run import timing_warnings
    row = {"noisy": True, "cv": 0.31, "samples": 40, "time_s": 2.2e-3, "time_s_q10": 1.9e-3,
           "time_s_q90": 3.2e-2, "contended": True, "other_cpu_share": 0.62, "steal_share": 0.0}
    lines = timing_warnings(row)
    assert "noisy" in lines[0] and "31 %" in lines[0] and "40 samples" in lines[0]
    assert "2.2 ms" in lines[0] and "32 ms" in lines[0]
    assert "contended" in lines[1] and "62 %" in lines[1]
    assert timing_warnings({"noisy": False, "cv": 0.01, "contended": False}) == []


def test_lock_wait_names_the_holder(tmp_path, caplog):
    import logging
    import threading
    from experiments.core import device
    path = tmp_path / device.CPU_LOCK
    _, held = device.acquire_first_free([path])
    got = []
    t = threading.Thread(target=lambda: got.append(device.acquire_first_free([path])))
    with caplog.at_level(logging.INFO, logger="experiments.core.device"):
        t.start()
        assert wait_for(lambda: "waiting for the CPU" in caplog.text)  # it waits: let go
        held.release()
        t.join(5)
    got[0][1].release()
    assert f"waiting for the CPU held by PID {os.getpid()}" in caplog.text


def test_the_profiler_s_kernels_go_to_the_counted_op_that_launched_them():
    from types import SimpleNamespace as Event

    from experiments.placement import profile

    mm = Event(name="aten::addmm", input_shapes=[[64], [8, 3584], [3584, 64]], cpu_parent=None,
               self_device_time_total=0.0, kernels=[])
    # split-K: the GEMM and its reduction, under a child the recorder did not count
    inner = Event(name="aten::mm", input_shapes=[[8, 3584], [3584, 64]], cpu_parent=mm,
                  self_device_time_total=12.0, kernels=["gemm", "reduce"])
    gelu = Event(name="aten::gelu", input_shapes=[[8, 64]], cpu_parent=None,
                 self_device_time_total=4.0, kernels=["elementwise"])
    prof = Event(profiler=Event(function_events=[mm, inner, gelu] * 2))  # two profiled calls
    counted = {("aten::addmm", "[[64], [8, 3584], [3584, 64]]"), ("aten::gelu", "[[8, 64]]")}
    times, kernels = profile._profiled_times(prof, counted, {}, True, calls=2)
    assert kernels == {("aten::addmm", "[[64], [8, 3584], [3584, 64]]"): 2.0,
                       ("aten::gelu", "[[8, 64]]"): 1.0}
    assert times[("aten::addmm", "[[64], [8, 3584], [3584, 64]]")] == pytest.approx(12e-6)
    # the call's counted ops get them appended; an op the profiler did not see is left as is
    ops = pd.DataFrame({"op": ["aten::addmm", "aten::gelu"],
                        "input_shapes": ["[[64], [8, 3584], [3584, 64]]", "[[8, 64]]"],
                        "profiled_kernels": [2, 1]})
    call = [["aten::addmm", "[[64], [8, 3584], [3584, 64]]", 1, 0, 0, 0, "matrix", "x", 0.0],
            ["aten::relu", "[[8, 64]]", 1, 0, 0, 0, "vector", "x", 0.0]]
    profile.with_kernels(call, ops)
    assert call[0][9] == 2 and len(call[1]) == 9


@pytest.mark.parametrize("module, x, name", [
    (torch.nn.ConvTranspose2d(16, 16, 2, stride=2), (2, 16, 6, 6), "aten::conv_transpose2d"),
    (torch.nn.ConvTranspose1d(8, 4, 3, bias=False), (2, 8, 10), "aten::conv_transpose1d"),
    (torch.nn.Conv2d(16, 16, 3), (2, 16, 6, 6), "aten::convolution")])
def test_a_transposed_convolution_is_named_so_and_its_profiled_time_found(module, x, name):
    from experiments.placement import opclass, profile

    # c_in == c_out with a bias: the shapes alone read as a plain convolution's
    ops = profile.profile_ops(module, (torch.randn(x),))
    assert ops.op.tolist() == [name] and (ops.time_s > 0).all()
    variant = "conv_transpose" if "transpose" in name else "conv"
    assert opclass.op_class(name, ops.input_shapes[0]) == (
        f"aten::convolution/{variant}{len(x) - 2}d", opclass.COMPUTE)
