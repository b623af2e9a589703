"""Parsing and printing numbers with units: 20M, 500k, 5ms, 2GB, 1h30m."""

from __future__ import annotations

import math
import re

from eas.errors import UserError

_COUNT_SUFFIX = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "B": 1e9, "T": 1e12}
_BYTES_SUFFIX = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
                 "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_SECONDS_SUFFIX = {"h": 3600, "m": 60, "s": 1, "min": 60, "ms": 1e-3, "us": 1e-6}
_NUMBER = r"(\d+(?:\.\d+)?)"


def parse_count(text: str, what: str) -> float:
    """'20M' -> 2e7, '500k' -> 5e5, '1.5G' -> 1.5e9."""
    match = re.fullmatch(_NUMBER + r"\s*([kKMGBT]?)", str(text).strip())
    if not match or not 0 < float(match.group(1)) < 1e30:
        raise UserError(f"{what}: expected a positive number with an optional k/M/G suffix (got {str(text)[:40]!r})")
    return float(match.group(1)) * _COUNT_SUFFIX[match.group(2)]


def parse_bytes(text: str, what: str) -> float:
    """'2GB' -> 2e9, '512MiB' -> 536870912, '100' -> 100 bytes."""
    match = re.fullmatch(_NUMBER + r"\s*([a-zA-Z]*)", str(text).strip())
    unit = match.group(2).upper() if match else ""
    if not match or (unit or "B") not in _BYTES_SUFFIX or not 0 < float(match.group(1)) < 1e30:
        raise UserError(f"{what}: expected a positive size like 2GB or 512MiB (got {str(text)[:40]!r})")
    return float(match.group(1)) * _BYTES_SUFFIX[unit or "B"]


def parse_seconds(text: str, what: str) -> float:
    """'2h', '90m', '45s', '1h30m', '5ms' -> seconds. Must be positive."""
    text = str(text).strip()
    parts = re.findall(_NUMBER + r"(h|min|ms|us|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text or len(text) > 40:
        raise UserError(f"{what}: expected a duration like 2h, 90m, 45s or 1h30m (got {text[:40]!r})")
    seconds = sum(float(n) * _SECONDS_SUFFIX[u] for n, u in parts)
    if seconds <= 0:
        raise UserError(f"{what}: must be longer than zero (got {text!r})")
    return seconds


def human(value: float, unit: str = "") -> str:
    """3504872 -> '3.50M'; 0.00123 with unit 's' stays plain."""
    for factor, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{suffix}{unit}"
    return f"{value:.3g}{unit}"


def human_bytes(value: float) -> str:
    for factor, suffix in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {suffix}"
    return f"{int(value)} B"


def format_duration(seconds: float) -> str:
    if not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        return "-"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: object) -> str:
    """Text safe to print on a terminal: control characters (escape sequences that could move
    the cursor or rewrite the screen, planted in a shared study) shown as \\xNN."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def table(rows: list[list], headers: list[str]) -> str:
    """A plain-text table with right-aligned numbers; cells are made printable."""
    cells = [[printable(h) for h in headers]] + [[printable(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [all(_looks_numeric(row[i]) for row in cells[1:]) for i in range(len(headers))]

    def line(row):
        return "  ".join(c.rjust(w) if n else c.ljust(w) for c, w, n in zip(row, widths, numeric, strict=True))

    return "\n".join([line(cells[0]), "  ".join("-" * w for w in widths)] + [line(r) for r in cells[1:]])


def _looks_numeric(text: str) -> bool:
    return text[:1].isdigit() or (text[:1] == "-" and text[1:2].isdigit())
