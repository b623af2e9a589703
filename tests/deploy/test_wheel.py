"""`pip install dist/eas-*.whl` into a fresh virtual environment, then `eas ui` serves the
explorer: the app ships inside the package. The new environment borrows the dependencies
(torch, streamlit, ...) from the development one through a path file, but not its editable
EAS: only the wheel provides `eas` there."""

import os
import shutil
import site
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.conftest import ROOT, free_port

pytestmark = pytest.mark.slow


def test_eas_ui_from_a_built_wheel(tmp_path, small_study):
    dist = tmp_path / "dist"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(dist), str(ROOT)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    wheel = next(dist.glob("eas-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    target = next((venv / "lib").glob("python*/site-packages"))
    # Dependencies only: a path entry is not a site dir, so its editable-install hooks do not run.
    (target / "dependencies.pth").write_text(site.getsitepackages()[0] + "\n")
    python = venv / "bin" / "python"
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
                                str(wheel)], capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr
    where = subprocess.run([str(python), "-c", "import eas, eas.ui; print(eas.__file__)"], capture_output=True,
                           text=True, cwd=tmp_path)
    assert where.returncode == 0 and str(target) in where.stdout, where.stdout + where.stderr
    assert (target / "eas" / "ui" / "app_pages" / "pareto.py").exists()

    root, env = small_study
    port = free_port()
    server = subprocess.Popen([str(venv / "bin" / "eas"), "ui", "--port", str(port)], cwd=root,
                              env={**os.environ, **env, "PYTHONPATH": ""}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline, health = time.monotonic() + 90, None
        while time.monotonic() < deadline and health != "ok":
            time.sleep(0.5)
            try:
                health = urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=5).read().decode()
            except OSError:
                continue
        assert health == "ok", server.stderr.read() if server.poll() is not None else "no answer"
        if shutil.which("chromium"):
            from playwright.sync_api import sync_playwright

            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=[
                    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"])
                page = browser.new_page()
                page.goto(f"http://127.0.0.1:{port}/")
                page.get_by_text("Open study").wait_for(timeout=90_000)
                browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
