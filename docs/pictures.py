"""The pictures of the docs, made by this script (never pasted): a short real search on digits,
then the explorer's pages in headless Chromium.

    python docs/pictures.py          # writes docs/images/*.png (about 2 minutes)
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

IMAGES = Path(__file__).resolve().parent / "images"
PAGES = {"explorer-pareto.png": ("pareto", '[data-testid="stPlotlyChart"] .main-svg'),
         "explorer-progress.png": ("progress", '[data-testid="stPlotlyChart"] .main-svg')}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    if not chromium:
        raise SystemExit("needs Debian's chromium (apt-get install chromium)")
    work = Path(tempfile.mkdtemp(prefix="eas-pictures-"))
    env = {**os.environ, "EAS_STUDIES_DIR": str(work / "studies")}
    subprocess.run([sys.executable, "-m", "eas", "search", "--space", "tiny", "--data", "digits", "--epochs", "4",
                    "--trials", "30", "--study", "digits-demo", "--sampler", "random", "--quiet"],
                   cwd=work, env=env, check=True)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "eas", "ui", "--port", str(port)], cwd=work, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.3)
        IMAGES.mkdir(exist_ok=True)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run"])
            for name, (path, ready) in PAGES.items():
                page = browser.new_page(viewport={"width": 1400, "height": 1100})
                page.goto(f"http://127.0.0.1:{port}/{path}")
                page.wait_for_selector(ready, timeout=90_000)
                page.wait_for_timeout(1500)  # plotly finishes drawing after its svg appears
                page.screenshot(path=str(IMAGES / name), full_page=True)
                print(f"wrote {IMAGES / name}")
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
