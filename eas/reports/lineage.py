"""Where a trial went after the search: the folders exported from it, trained, compressed,
found in a folder tree, so `eas show --trial` and the explorer show the whole path from
candidate to deployed model.

An export's arch.json names its study and trial (`provenance`); a compressed model's also
names the folder it was made from (`derived_from`) and keeps the provenance. The scan is
bounded (depth, folders) and skips what never holds exports, so it stays fast in a big tree.
"""

from __future__ import annotations

import os
from pathlib import Path

from eas.jsonfile import JsonFileError, read_json

SKIPPED = {".git", ".venv", "venv", "node_modules", "__pycache__", "studies", ".cache"}
MAX_DEPTH = 6
MAX_FOLDERS = 5000


def _arch_files(root: Path):
    base = len(root.parts)
    for seen, (folder, subfolders, files) in enumerate(os.walk(root)):
        if seen >= MAX_FOLDERS:
            return
        depth = len(Path(folder).parts) - base
        subfolders[:] = [] if depth >= MAX_DEPTH else sorted(
            s for s in subfolders if s not in SKIPPED and not s.startswith("."))
        if "arch.json" in files:
            yield Path(folder)


def _read_json(path: Path) -> dict | None:
    try:
        value = read_json(path)
    except (JsonFileError, OSError):
        return None
    return value if isinstance(value, dict) else None


def descendants(study: str, trial: int, root: Path) -> list[dict]:
    """Every folder under `root` made from the trial, parents before children."""
    found = {}
    for folder in _arch_files(Path(root)):
        document = _read_json(folder / "arch.json")
        provenance = (document or {}).get("provenance")
        if not isinstance(provenance, dict) or provenance.get("study") != study or provenance.get("trial") != trial:
            continue
        derived = document.get("derived_from") if isinstance(document.get("derived_from"), dict) else {}
        report = _read_json(folder / "report.json") or {}
        int8 = report.get("int8") if isinstance(report.get("int8"), dict) else {}
        accuracy = report.get("test_accuracy", int8.get("test_accuracy"))
        found[str(folder.resolve())] = {
            "folder": os.path.relpath(folder, root), "made_by": derived.get("method", "export"),
            "from": derived.get("folder") if isinstance(derived.get("folder"), str) else None,
            "genome": document.get("genome") if isinstance(document.get("genome"), str) else None,
            "trained": (folder / "model.safetensors").is_file() or "int8" in report,
            "test_accuracy": None if isinstance(accuracy, bool) or not isinstance(accuracy, (int, float)) else accuracy}
    ordered, placed = [], set()

    def place(parent: str | None, depth: int) -> None:
        for key, entry in sorted(found.items(), key=lambda item: item[1]["folder"]):
            if key not in placed and (entry["from"] == parent or (parent is None and entry["from"] not in found)):
                placed.add(key)
                ordered.append({**entry, "depth": depth, "from": os.path.relpath(entry["from"], root)
                                if entry["from"] else None})
                place(key, depth + 1)

    place(None, 0)
    return ordered


def lineage_rows(entries: list[dict]) -> list[dict]:
    """What the explorer and `eas show` print: one row per folder, indented under its parent."""
    return [{"folder": "  " * e["depth"] + ("└ " if e["depth"] else "") + e["folder"], "made by": e["made_by"],
             "trained": "yes" if e["trained"] else "no",
             "test accuracy": f"{e['test_accuracy']:.2%}" if e["test_accuracy"] is not None else "-",
             "genome": e["genome"]} for e in entries]
