"""The library's input contract: a public function checks each argument here, at the door,
before anything is read, written or trained. A refusal is one line that names the function,
the argument, what it must be and what it got: `UserError` (a ValueError) for a value out of
range, `ArgumentTypeError` (a UserError and a TypeError) for a value of the wrong type.
Booleans are never taken as numbers, nor numbers as booleans.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable

from eas.errors import ArgumentTypeError, UserError


def shown(value: object) -> str:
    """What the caller gave, short: its repr (at most 40 characters) and, for surprises, its type."""
    text = repr(value)
    text = text if len(text) <= 40 else text[:37] + "..."
    return text if isinstance(value, (int, float, str, type(None))) else f"{text} ({type(value).__name__})"


def _refuse_type(where: str, name: str, wanted: str, value: object):
    raise ArgumentTypeError(f"{where}: {name} must be {wanted} (got {shown(value)})")


def whole(where: str, name: str, value, low: int | None = None, high: int | None = None,
          optional: bool = False) -> int | None:
    """An int (never a bool or a float that happens to be whole) within [low, high]."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        _refuse_type(where, name, "a whole number" + (" or None" if optional else ""), value)
    if (low is not None and value < low) or (high is not None and value > high):
        raise UserError(f"{where}: {name} must be {_range(low, high)} (got {value})")
    return value


def number(where: str, name: str, value, low: float | None = None, high: float | None = None,
           optional: bool = False, above: float | None = None) -> float | None:
    """A finite int or float (never a bool) within [low, high], and above `above` when given."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _refuse_type(where, name, "a number" + (" or None" if optional else ""), value)
    if not math.isfinite(value) or (low is not None and value < low) or (high is not None and value > high) \
            or (above is not None and value <= above):
        span = f"above {above:g}" + (f" and at most {high:g}" if high is not None else "") if above is not None \
            else _range(low, high)
        raise UserError(f"{where}: {name} must be a finite number {span} (got {value})")
    return float(value)


def flag(where: str, name: str, value) -> bool:
    if not isinstance(value, bool):
        _refuse_type(where, name, "True or False", value)
    return value


def text(where: str, name: str, value, optional: bool = False, choices: Iterable[str] | None = None,
         empty: bool = False) -> str | None:
    """A str (not empty unless allowed), one of `choices` when given."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        _refuse_type(where, name, "a string" + (" or None" if optional else ""), value)
    if not empty and not value.strip():
        raise UserError(f"{where}: {name} must not be empty")
    if choices is not None and value not in choices:
        raise UserError(f"{where}: {name} must be one of {', '.join(choices)} (got {shown(value)})")
    return value


def path(where: str, name: str, value, optional: bool = False) -> str | None:
    """A path given as a str or an os.PathLike, returned as a str."""
    if value is None and optional:
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        _refuse_type(where, name, "a path (str or pathlib.Path)" + (" or None" if optional else ""), value)
    if not value.strip() or "\x00" in value:
        raise UserError(f"{where}: {name} must be a path (got {shown(value)})")
    return value


def texts(where: str, name: str, value, optional: bool = False, empty: bool = True) -> list[str] | None:
    """A list or tuple of strings (a single string is refused: it would be read letter by letter)."""
    if value is None and optional:
        return None
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        _refuse_type(where, name, "a list of strings" + (" or None" if optional else ""), value)
    if not value and not empty:
        raise UserError(f"{where}: {name} must not be empty")
    return list(value)


def mapping(where: str, name: str, value, optional: bool = False) -> dict | None:
    if value is None and optional:
        return None
    if not isinstance(value, dict):
        _refuse_type(where, name, "a dict" + (" or None" if optional else ""), value)
    return value


def function(where: str, name: str, value, optional: bool = False) -> Callable | None:
    if value is None and optional:
        return None
    if not callable(value):
        _refuse_type(where, name, "a function" + (" or None" if optional else ""), value)
    return value


def known_keywords(where: str, given: dict, known: Iterable[str]) -> None:
    """Keyword arguments a function takes through **options: an unknown one is named."""
    known = sorted(known)
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ArgumentTypeError(f"{where}: unknown keyword argument {unknown[0]!r} (known: {', '.join(known)})")


def _range(low, high) -> str:
    if low is not None and high is not None:
        return f"from {low:,} to {high:,}"
    return f"at least {low:,}" if low is not None else f"at most {high:,}"
