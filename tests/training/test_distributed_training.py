"""`eas train --nproc 2`: data-parallel training on CPU (gloo) through torchrun."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_eas

pytestmark = pytest.mark.slow


def _copy(folder: Path, to: Path) -> Path:
    import shutil

    shutil.copytree(folder, to)
    return to


def test_two_processes_reach_the_accuracy_of_one_with_the_same_global_batch(knee_export, tmp_path):
    reports = {}
    for nproc in (1, 2):
        folder = _copy(knee_export, tmp_path / f"p{nproc}")
        result = run_eas("train", str(folder), "--data", "digits", "--epochs", "8", "--batch-size", "64",
                         "--nproc", str(nproc), "--quiet", "--json", timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        reports[nproc] = json.loads(result.stdout)
    one, two = reports[1], reports[2]
    assert (one.get("processes", 1), two["processes"]) == (1, 2)
    assert two["restarts"] == 0 and two["plan"] == one["plan"] and two["epochs_run"] == one["epochs_run"] == 8
    # Within noise: 3 standard errors of the difference of two accuracies on the same test set.
    from eas.data.datasets import load_dataset

    p, n = (one["test_accuracy"] + two["test_accuracy"]) / 2, len(load_dataset("digits").test_y)
    assert abs(one["test_accuracy"] - two["test_accuracy"]) <= 3 * math.sqrt(2 * p * (1 - p) / n) + 1e-9
    assert two["test_accuracy"] > 0.5 and two["energy_kwh"] > 0


def _workers(folder: Path) -> list[int]:
    """PIDs of the torchrun workers training `folder`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        # a worker, not torchrun itself
        workers_module = b"eas.training.torchrun_worker" in command and b"torch.distributed.run" not in command
        if workers_module and str(folder).encode() in b" ".join(command):
            found.append(int(entry.name))
    return found


def test_a_worker_killed_with_sigkill_is_restarted_from_the_checkpoint_and_training_finishes(knee_export, tmp_path):
    folder = _copy(knee_export, tmp_path / "killed")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen([sys.executable, "-m", "eas", "train", str(folder), "--data", "digits", "--epochs",
                                "20", "--checkpoint-every", "5", "--nproc", "2", "--max-restarts", "2", "--quiet",
                                "--json"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        deadline = time.monotonic() + 300
        while not (folder / "checkpoint").exists():  # the first checkpoint: a restart has something to resume
            assert process.poll() is None, process.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no checkpoint after 300 s"
            time.sleep(0.1)
        workers = _workers(folder)
        assert len(workers) == 2, workers
        os.kill(workers[-1], signal.SIGKILL)
        out, err = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err[-3000:]
    report = json.loads(out)
    assert report["restarts"] >= 1 and report["processes"] == 2 and report["epochs_run"] == 20
    assert len(report["history"]) == 20 and [h["epoch"] for h in report["history"]] == list(range(1, 21))
    assert not _workers(folder)
