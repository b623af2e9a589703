"""Modules imported on first use, declared at the top of the module that needs them.

The faces (eas/cli, eas/ui) name what they use at their top, where tests/test_structure.py checks
it against the layering, while `eas --help` never pays for torch, numpy or Optuna: the module is
imported when a command first reaches into it (as Optuna's `_LazyImport` does).
"""

from __future__ import annotations

import importlib
import importlib.util
import types


class _LazyModule(types.ModuleType):
    def __init__(self, name: str):
        super().__init__(name)

    def __getattr__(self, attribute: str):
        module = importlib.import_module(self.__name__)
        self.__dict__.update(module.__dict__)  # later lookups skip this method
        return getattr(module, attribute)


def lazy_import(name: str) -> types.ModuleType:
    """`name`, imported when one of its attributes is first read."""
    return _LazyModule(name)


def available(name: str) -> bool:
    """Whether an optional module is installed, without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
