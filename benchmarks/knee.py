"""The starting point of the after-the-search benchmarks: the knee of the README demo's study
(mobile space, Fashion-MNIST, 3 minutes, at most 20 M MACs), exported and trained, made
through the real command line; or a trained export given with --folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EAS = [sys.executable, "-m", "eas"]


def eas(*args: str, cwd: Path) -> str:
    done = subprocess.run([*EAS, *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"eas {' '.join(args)} failed: {done.stderr.strip()[-500:]}")
    return done.stdout


def trained_knee(work: Path, epochs: int, given: str | None) -> Path:
    """A trained export: `given`, or the demo study's knee trained for `epochs` epochs."""
    if given:
        return Path(given)
    folder = work / "knee"
    eas("search", "--space", "mobile", "--data", "fashion-mnist", "--budget", "3m", "--max-macs", "20M",
        "--study", "demo", "--quiet", cwd=work)
    eas("export", "demo", "--pick", "knee", "--out", str(folder), cwd=work)
    eas("train", str(folder), "--data", "fashion-mnist", "--epochs", str(epochs), "--quiet", cwd=work)
    return folder


def report(folder: Path) -> dict:
    return json.loads((folder / "report.json").read_text())
