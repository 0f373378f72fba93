"""Targets to place: `module:function` or `path/to/file.py:function`, and the factory convention.

A target is a *factory* when its name starts with `make_` (or it has `rooflab_factory = True`):
make(batch, dtype, device, generator, **kwargs) -> (fn, args); see experiments/models/."""

from __future__ import annotations
import importlib
import importlib.util
import os
import sys
from pathlib import Path
import torch


FACTORY_PREFIX = "make_"


class TargetError(ValueError):
    """A target that cannot be imported or is not a callable; the message says which and why."""


def load_target(spec: str):
    """The object `module:function` or `path/to/file.py:function` names."""
    where, sep, attr = spec.rpartition(":")
    if not sep or not where or not attr:
        raise TargetError(f"target {spec!r}: give module:function or path/to/file.py:function")
    try:
        if where.endswith(".py") or os.sep in where:
            path = Path(where)
            if not path.is_file():
                raise TargetError(f"target {spec!r}: no file {path}")
            name = f"rooflab_user_{abs(hash(str(path.resolve())))}"
            mod_spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[name] = module  # dataclasses and pickling look modules up by name
            mod_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except TargetError:
        raise
    except Exception as exc:  # ImportError, or the module raising while it loads
        raise TargetError(f"target {spec!r}: cannot import {where!r}: "
                          f"{type(exc).__name__}: {exc}") from None
    if not hasattr(module, attr):
        makers = sorted(n for n in dir(module) if n.startswith(FACTORY_PREFIX))
        raise TargetError(f"target {spec!r}: {where!r} has no {attr!r}"
                          + (f"; its factories: {makers}" if makers else ""))
    obj = getattr(module, attr)
    if not callable(obj):
        raise TargetError(f"target {spec!r} is a {type(obj).__name__}, not a callable")
    return obj


def is_factory(obj) -> bool:
    return bool(getattr(obj, "rooflab_factory", False)) or getattr(
        obj, "__name__", "").startswith(FACTORY_PREFIX)


def build(factory, batch: int, dtype: torch.dtype, device, generator, kwargs: dict):
    """(fn, args) from a factory, checked to be what the convention says."""
    made = factory(batch, dtype, device, generator, **(kwargs or {}))
    if not (isinstance(made, (tuple, list)) and len(made) == 2 and callable(made[0])):
        raise TypeError(f"factory {getattr(factory, '__name__', factory)} returned "
                        f"{type(made).__name__}; it must return (fn, args)")
    fn, args = made
    args = (args,) if isinstance(args, torch.Tensor) else tuple(args)
    return fn, args
