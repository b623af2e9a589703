import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EAS = [sys.executable, "-m", "eas"]

# The tests train in this process as an application would: its threads wait passively (the
# command line decides this for itself; `import eas` changes nothing process-wide).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# The test session decodes datasets into its own cache (its subprocesses inherit it), so a
# user's ~/.cache/eas is never filled with the tests' throwaway folders.
if "EAS_DATA_DIR" not in os.environ:
    os.environ["EAS_DATA_DIR"] = tempfile.mkdtemp(prefix="eas-test-data-")
    atexit.register(shutil.rmtree, os.environ["EAS_DATA_DIR"], True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def built_once(tmp_path_factory, name: str, build) -> Path:
    """A folder that `build(folder)` fills once per test run, shared by all test processes: the
    first to ask builds it under a file lock, the others wait for it and read it (pytest-xdist's
    recipe for a session fixture that must run once). For read-only results that cost a minute:
    built per process, each test process paid that minute again."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    # under xdist each process has its own base inside the run's folder; alone, the base is the run's
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = shared / name
    with FileLock(str(shared / f"{name}.lock")):
        if not (folder / ".built").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            (folder / ".built").touch()
    return folder


def run_eas(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 300):
    """Run the real `eas` command line in a subprocess."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run([*EAS, *args], capture_output=True, text=True, cwd=cwd or ROOT,
                          env=full_env, timeout=timeout)


@pytest.fixture
def eas_cli():
    return run_eas


def assert_user_error(result, *fragments: str) -> None:
    """Exit code 2, exactly one line on stderr, no traceback, message mentions fragments."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture(scope="session")
def small_study(tmp_path_factory):
    """A real study made by the CLI: tiny space on digits, 6 random trials under a MACs limit
    (so some are infeasible), made once for all test processes. Returns (root folder, env with
    EAS_STUDIES_DIR). Tests read it; `eas verify` may add its results (other tests allow for that)."""
    def search(root: Path) -> None:
        result = run_eas("search", "--space", "tiny", "--data", "digits", "--epochs", "2", "--trials", "6",
                         "--study", "s", "--quiet", "--max-macs", "700k", "--sampler", "random", "--rungs", "1",
                         env={"EAS_STUDIES_DIR": str(root / "studies")}, cwd=root)
        assert result.returncode == 0, result.stderr

    root = built_once(tmp_path_factory, "small-study", search)
    return root, {"EAS_STUDIES_DIR": str(root / "studies")}


@pytest.fixture(scope="session")
def knee_export(small_study, tmp_path_factory):
    """The knee of the shared study, exported by the CLI once for all test processes; copy it
    before changing it."""
    root, env = small_study

    def export(folder: Path) -> None:
        result = run_eas("export", "s", "--pick", "knee", "--out", str(folder / "knee"), env=env, cwd=root)
        assert result.returncode == 0, result.stderr

    return built_once(tmp_path_factory, "knee-export", export) / "knee"
