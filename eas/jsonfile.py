"""EAS's own JSON files (arch.json, report.json, checkpoints' state, supernet.json, trust.json,
the data cache's header, predictors) read back as input: a file may have been truncated, edited
or replaced, so it is read within limits on size and nesting, and every failure is one line
naming the file (a `[` nested 200,000 deep is not a RecursionError traceback)."""

from __future__ import annotations

import json
from pathlib import Path

from eas.errors import UserError

MAX_BYTES = 64 * 2**20
MAX_DEPTH = 64


class JsonFileError(UserError, ValueError):
    """One line naming the file; a ValueError too, so readers that refuse malformed content
    refuse a malformed file the same way."""


def depth(value, limit: int = MAX_DEPTH) -> int:
    """How deeply lists and objects nest in `value` (counted without recursion, stopping past `limit`)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if deepest > limit:
                return deepest
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def nested_too_deeply(what: str) -> str:
    """The one message for structure nested beyond MAX_DEPTH, wherever EAS reads it (JSON files,
    space definitions, stored attributes)."""
    return f"{what}: nested deeper than {MAX_DEPTH} levels"


def may_nest_too_deeply(text: str) -> bool:
    """Whether JSON `text` could nest beyond MAX_DEPTH at all (a cheap test before `depth`)."""
    return text.count("[") + text.count("{") > MAX_DEPTH


def read_json(path: Path | str, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH):
    """The parsed content of a JSON file, or JsonFileError (one line) when it cannot be; a file
    that is not there raises FileNotFoundError, for callers to whom that means something else."""
    path = Path(path)
    try:
        if path.stat().st_size > max_bytes:
            raise JsonFileError(f"{path}: larger than {max_bytes // 2**20 or max_bytes} "
                                f"{'MiB' if max_bytes >= 2**20 else 'bytes'}: not a file EAS wrote")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except OSError as error:
        raise JsonFileError(f"cannot read {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise JsonFileError(f"{path}: not UTF-8 text: not a file EAS wrote") from None
    try:
        value = json.loads(text)
    except RecursionError:
        raise JsonFileError(nested_too_deeply(str(path)) + ": not a file EAS wrote") from None
    except ValueError as error:
        raise JsonFileError(f"{path}: not JSON ({str(error).splitlines()[0][:80]})") from None
    if depth(value, max_depth) > max_depth:
        raise JsonFileError(nested_too_deeply(str(path)) + ": not a file EAS wrote")
    return value
