"""EAS: efficient architecture search.

The public names are imported lazily so that `eas --help` never pays for torch.
"""

from importlib import import_module

__version__ = "0.1.0"

_EXPORTS = {
    "Arch": "eas.genome",
    "GenomeError": "eas.genome",
    "load_space": "eas.space",
    "list_spaces": "eas.space",
    "build": "eas.builder",
    "profile": "eas.cost",
    "Profile": "eas.cost",
    "reference": "eas.reference",
    "UserError": "eas.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'eas' has no attribute {name!r}")
