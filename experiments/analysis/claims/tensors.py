"""Where tensors live: copies to the device, creating on it, and mixing devices."""

from __future__ import annotations

import pandas as pd

from experiments.analysis.dataset import param
from experiments.analysis.claims.base import PHYSICAL, NotMeasurable, Result, claim, section
from experiments.analysis.units import qty

SECTION = section("tensors", "Where tensors live: host-device copies", "transfer")
SLOWER = 5  # C2: the device's own memory moves data at least this many times faster


def _copies(s) -> pd.DataFrame:
    s.need_gpu("host-to-device copies need a GPU")
    rows = s.exp("transfer")
    label = (rows.op + " " + rows.variant.fillna("")).str.strip()
    return rows[label.str.contains("h2d|d2h") & (rows.byte_per_s > 0)].assign(label=label)


@claim("C2", SECTION,
       en="Tensors are created on the CPU by default; .to('cuda') copies them over PCIe and is "
          "expensive.",
       zh="Tensor默认不会在GPU里…….to()这个API真的会把数据从系统内存经过PCIe拿去显存，所以是一个比较昂贵的操作。",
       prediction=lambda: f"the best host-to-device copy is at least {SLOWER}x slower than the "
                          "device "
                  "memory's own bandwidth (measured by the bandwidth experiment, else a "
                  "device-to-device copy).",
       fails_if=lambda: f"a host-to-device copy reaches more than 1/{SLOWER} of the device "
                        "memory's bandwidth.",
       experiments=("transfer", "bandwidth"), limits=("SLOWER",))
def c2(s):
    rows = _copies(s)
    h2d = rows[rows.label.str.contains("h2d")]
    if h2d.empty:
        raise NotMeasurable("no ok host-to-device transfer rows")
    best = h2d.loc[h2d.byte_per_s.idxmax()]
    device_bw, source = s.ceiling("dram_bw"), "DRAM bandwidth (bandwidth experiment)"
    if device_bw is None:
        d2d = s.rows[(s.rows.op == "d2d_copy") & (s.rows.status == "ok")]
        device_bw = d2d.byte_per_s.max() if not d2d.empty else None
        source = "device-to-device copy"
    if not device_bw:
        raise NotMeasurable("no device bandwidth measured (no bandwidth rows, no d2d_copy)")
    ratio = device_bw / best.byte_per_s
    sheet = ""
    if s.sheet and s.sheet.host_link_Bps and s.sheet.bandwidth_Bps:
        sheet = f"; the datasheet says {s.sheet.bandwidth_Bps / s.sheet.host_link_Bps:.0f}x"
    return Result(ratio >= SLOWER,
                  f"best host-to-device copy {qty(best.byte_per_s, 'B/s')} ({best.label}, "
                  f"{qty(best.bytes, 'B')}) vs device memory {qty(device_bw, 'B/s')}: {ratio:.0f}x "
                  f"slower{sheet}", "device memory bandwidth / best host-to-device copy", ratio,
                  f">= {SLOWER}", f"transfer: h2d copies; {source}", len(h2d))


@claim("C3", SECTION,
       en="Creating a tensor with device='cuda' allocates it in device memory directly and saves "
          "one transfer.",
       zh="创建张量的时候可以指定device，会直接在显存中分配存储空间。相比于在CPU创建然后移动省了一次传输。",
       prediction="at every size measured, creating the tensor on the device costs less than "
                  "the host-to-device copy it saves, that copy timed alone (apart from the CPU's "
                  "random-number generation).",
       fails_if="at some size, randn(..., device='cuda') takes as long as or longer than moving "
                "the same tensor from the host with .to('cuda').",
       experiments=("transfer",))
def c3(s):
    s.need_gpu("creating on a device vs moving to it needs a GPU")
    rows = s.exp("transfer", "create|move_to_device")
    t = rows.pivot_table(index="n", columns="op", values="time_s", aggfunc="median")
    need = {"create_on_device", "move_to_device"}
    if not need <= set(t.columns) or t.dropna(subset=list(need)).empty:
        raise NotMeasurable("no move_to_device rows beside create_on_device: the transfer was "
                            "not timed apart from the random-number generation (rows measured "
                            "before rooflab timed it alone)")
    t = t.dropna(subset=list(need))
    nbytes = rows.groupby("n").bytes.max().reindex(t.index)
    if s.sheet and s.sheet.host_link_Bps and s.sheet.bandwidth_Bps:
        fast = (t.move_to_device < nbytes / (PHYSICAL * s.sheet.host_link_Bps)) | \
            (t.create_on_device < nbytes / (PHYSICAL * s.sheet.bandwidth_Bps))
        if fast.any():
            n = fast.idxmax()
            raise NotMeasurable(f"{qty(nbytes[n], 'B')} moved in {qty(t.move_to_device[n], 's')} "
                                f"or created in {qty(t.create_on_device[n], 's')}: faster than the "
                                f"{s.sheet.name} datasheet's host link or memory allow, not a "
                                "reading")
    ratios = t.move_to_device / t.create_on_device
    n = t.index.max()
    last = t.loc[n]
    parts = [f"{qty(nbytes[n], 'B')}: create on device {qty(last.create_on_device, 's')}, move an "
             f"existing host tensor {qty(last.move_to_device, 's')} ({ratios[n]:.1f}x)"]
    if pd.notna(last.get("create_on_host")) and pd.notna(last.get("create_then_move")):
        parts.append(f"create on the host then move {qty(last.create_then_move, 's')} (the "
                     f"host's randn alone {qty(last.create_on_host, 's')})")
    parts.append(f"move / create from {ratios.min():.1f}x to {ratios.max():.1f}x over "
                 f"{len(t)} sizes")
    return Result(bool((ratios > 1).all()), "; ".join(parts), "move_to_device time / "
                  "create_on_device time, smallest over the sizes", float(ratios.min()),
                  "> 1 at every size", "transfer: create_on_device, move_to_device, "
                  "create_on_host, create_then_move", len(rows))


@claim("C4", SECTION,
       en="An operation on tensors on different devices raises an error.",
       zh="如果数据不在同一个设备，计算会报错。",
       prediction="adding a CPU tensor to a CUDA tensor raises (a 0-dim CPU tensor is a scalar "
                  "and does not).",
       fails_if="a case raises where it should not, or does not raise where it should.",
       experiments=("transfer",), figure="")
def c4(s):
    s.need_gpu("mixing devices needs a second device")
    rows = s.rows[(s.rows.experiment == "transfer") & s.rows.op.str.contains("cross")]
    if rows.empty:
        raise NotMeasurable("no transfer rows with op cross_device")
    if not rows.status.isin(["ok", "wrong_result"]).any():
        raise NotMeasurable("no cross-device check ran (" + ", ".join(
            f"{n} {st}" for st, n in rows.status.value_counts().items()) + ")")
    err = param(rows, "error_type")
    raised = param(rows, "raised").fillna(err.notna()).astype(bool)
    expected = param(rows, "expected_raise").fillna(True).astype(bool)
    case = param(rows, "case").fillna(rows.variant.fillna("case"))
    parts = [f"{c}: {'raised ' + str(e) if r else 'did not raise'} "
             f"(expected: {'raise' if x else 'no error'})"
             for c, r, e, x in zip(case, raised, err, expected)]
    right = raised == expected
    return Result(bool(right.all()), "; ".join(parts), "share of cases that behaved as expected",
                  float(right.mean()), "= 1 (every case)", "transfer: cross_device", len(rows))
