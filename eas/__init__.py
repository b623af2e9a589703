"""EAS: efficient architecture search.

    import eas
    result = eas.search(space="tiny", data="digits", trials=20, epochs=2)   # or data=(x, y)
    print(result.knee.genome, len(result.front))

The public names are imported lazily so that `eas --help` never pays for torch, and importing
EAS changes nothing process-wide (eas.application).
"""

from importlib import import_module

__version__ = "0.1.0"

_EXPORTS = {
    "search": "eas.api",
    "open_study": "eas.api",
    "evaluate": "eas.api",
    "export": "eas.api",
    "train": "eas.api",
    "SearchResult": "eas.api",
    "prepare_process": "eas.application",
    "register_objective": "eas.objectives",
    "Arch": "eas.arch.genome",
    "GenomeError": "eas.arch.genome",
    "load_space": "eas.arch.space",
    "list_spaces": "eas.arch.space",
    "build": "eas.arch.builder",
    "profile": "eas.arch.profile",
    "Profile": "eas.arch.profile",
    "reference": "eas.arch.reference",
    "UserError": "eas.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'eas' has no attribute {name!r}")
