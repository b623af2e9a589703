"""EAS: efficient architecture search.

The public names are imported lazily so that `eas --help` never pays for torch.
"""

import os
from importlib import import_module

# OpenMP threads that busy-wait for a descheduled partner burn whole cores on a busy machine:
# measured here, a candidate's training took 13x the CPU time (and 13x the wall time) while
# another torch job ran; with passive waiting it took the same CPU time as on an idle machine,
# at a cost of 5-10% speed on an idle machine for mid-size candidates. Set before torch loads;
# a value the user chose is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"

_EXPORTS = {
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
