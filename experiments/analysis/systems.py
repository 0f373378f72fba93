"""Which fitted system a placed call goes on (`rooflab place`, place()): the ceilings table to
read, and the system in it for a device."""

from __future__ import annotations

from pathlib import Path

from experiments.core import layout


def read_ceilings(ceilings):
    """A ceilings table from a DataFrame, a path, or None (the default path, if it exists)."""
    import pandas as pd

    if ceilings is None:
        ceilings = DEFAULT_CEILINGS if Path(DEFAULT_CEILINGS).is_file() else None
    if ceilings is None or isinstance(ceilings, pd.DataFrame):
        return ceilings
    if not Path(ceilings).is_file():
        return None
    return pd.read_parquet(ceilings)


def find_system(ceilings, device_name: str, host: str | None = None, system: str | None = None):
    """The ceilings' system for this device: named, else this host's fit of the device's model
    (this run's first), else another machine's fit of the same model (a published set)."""
    if ceilings is None or ceilings.empty:
        return None
    if system:
        return system if system in set(ceilings.system) else None
    same = ceilings[(ceilings.device_name == device_name) & ceilings.value.notna()]
    if same.empty:
        return None
    order = same.assign(mine=(same.host == host).astype(int) * 2 + (same.source == "run"))
    return order.sort_values("mine", ascending=False, kind="stable").system.iloc[0]


def no_roofline(device: str) -> str:
    return (f"no fitted roofline for {device} yet: run `snakemake --cores all` (or "
            f"`snakemake --cores all --config 'devices=[\"{device}\"]'` for this device alone) "
            f"to measure it, then pass --ceilings {DEFAULT_CEILINGS}")


DEFAULT_CEILINGS = str(layout.file("results", "ceilings"))  # a default run's

