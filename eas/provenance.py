"""Library versions recorded with every result, so a number can be traced to what made it."""

from __future__ import annotations

import platform


def versions() -> dict:
    import optuna
    import torch

    from eas import __version__

    return {"eas": __version__, "torch": torch.__version__, "optuna": optuna.__version__,
            "python": platform.python_version()}
