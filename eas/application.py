"""What an application that runs EAS decides for its whole process, and a library does not:
how waiting threads behave, where log lines go, Optuna's verbosity. `import eas` changes none
of it; the `eas` command line calls `prepare_process()` at its start, and the Python API's search,
evaluation and training call `passive_threads()` before torch first loads.
"""

from __future__ import annotations

import logging
import os
import sys

from eas.lazy import lazy_import

optuna_logging = lazy_import("optuna.logging")

LOGGER = "eas"


def passive_threads() -> None:
    """OpenMP threads that busy-wait for a descheduled partner burn whole cores on a busy
    machine: measured here, a candidate's training took 13x the CPU time (and 13x the wall time)
    while another torch job ran; with passive waiting it took the same CPU time as on an idle
    machine, at a cost of 5-10% speed on an idle one. It must be set before torch loads; a value
    the user chose is kept, and once torch is loaded it is left alone (it would do nothing)."""
    if "torch" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


class _Lines(logging.Formatter):
    """Plain lines on stderr: a warning says so, information is the message alone."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        return f"warning: {message}" if record.levelno == logging.WARNING else message


def show_log(level: int = logging.INFO, stream=None) -> None:
    """EAS's log lines (progress, warnings) on `stream` (stderr), once per process."""
    logger = logging.getLogger(LOGGER)
    logger.setLevel(level)
    if not any(isinstance(h.formatter, _Lines) for h in logger.handlers):
        handler = logging.StreamHandler(stream or sys.stderr)
        handler.setFormatter(_Lines())
        logger.addHandler(handler)
        logger.propagate = False


_quiet_optuna = False


def quiet_optuna_if_asked() -> None:
    """Optuna sets its own verbosity when it is imported, so an application's wish for quiet is
    applied where EAS opens an Optuna storage (eas.study.storage), once Optuna is loaded."""
    if _quiet_optuna:
        optuna_logging.set_verbosity(optuna_logging.WARNING)


def prepare_process() -> None:
    """What the command line decides for its process (and an application may choose too): threads
    that wait passively, EAS's progress and warnings on stderr, Optuna's per-trial lines off."""
    global _quiet_optuna
    passive_threads()
    show_log()
    _quiet_optuna = True
