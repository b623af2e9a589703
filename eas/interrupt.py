"""Ctrl-C that cannot be lost.

Python raises KeyboardInterrupt wherever the main thread happens to be. When that is inside a
weakref callback or a __del__ run by the garbage collector (seen: SQLAlchemy's class registry),
the exception is printed as "ignored" and the program runs on: a search kept training until its
budget after a Ctrl-C. So the handler also remembers the request, and training loops call
`check()` at every step, which raises it again at a safe point. Raising consumes the request:
one Ctrl-C is one KeyboardInterrupt, and a process that handles it (a test run, a notebook) is
not interrupted again by the next training it starts.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

_requested = False
_deferring = False


class Interrupted(KeyboardInterrupt):
    """The KeyboardInterrupt our handler raises. A subclass on purpose: CPython remembers an exact
    KeyboardInterrupt that passed through any embedded evaluation (PyRun_*, which some extensions
    use) as "unhandled" even when EAS caught it later, and then ends the process by SIGINT (exit
    -2) instead of the 130 EAS chose; seen in 1 of 6 searches stopped by SIGTERM mid-trial."""


def _handler(signum, frame) -> None:
    global _requested
    _requested = True
    if not _deferring:
        raise Interrupted


@contextmanager
def deferred() -> Iterator[None]:
    """A Ctrl-C inside the block waits for it to end and is raised at the next check(): a
    checkpoint is written and recorded as written together (seen: a Ctrl-C between the two made
    `eas supernet train` say its checkpoint held step 0 when it held step 20)."""
    global _deferring
    outer, _deferring = _deferring, True
    try:
        yield
    finally:
        _deferring = outer


def _quiet_unraisable(unraisable, default=sys.unraisablehook, interrupt=KeyboardInterrupt) -> None:
    """A Ctrl-C that landed in a garbage-collector callback is remembered and raised again at the
    next check(): Python's "Exception ignored ... Traceback ... KeyboardInterrupt" is noise. The
    defaults are bound at definition: at interpreter exit this module's globals are already None."""
    if not isinstance(unraisable.exc_value, interrupt):
        default(unraisable)


def install(sigterm: bool = False) -> None:
    """Use the remembering handler, unless Ctrl-C is ignored or handled by someone else. With
    `sigterm`, a SIGTERM (a service manager, `kill`) stops as cleanly as Ctrl-C."""
    global _requested
    _requested = False
    sys.unraisablehook = _quiet_unraisable
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _handler)
    if sigterm and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _handler)


def check() -> None:
    """Raise KeyboardInterrupt, once, if a Ctrl-C arrived and may have been swallowed on its way."""
    global _requested
    if _requested:
        _requested = False
        raise Interrupted
