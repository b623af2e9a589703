"""Library versions recorded with every result, so a number can be traced to what made it."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version

from eas import __version__


def _installed(package: str) -> str | None:
    # The installed distribution's version, which is the module's __version__ (local build tags
    # such as "+cpu" included), read without importing torch.
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def versions() -> dict:
    return {"eas": __version__, "torch": _installed("torch"), "optuna": _installed("optuna"),
            "python": platform.python_version()}
