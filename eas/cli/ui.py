"""`eas ui`: serve the Streamlit Pareto explorer that ships inside the package."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from eas.cli.options import StorageOption
from eas.errors import UserError

APP = Path(__file__).resolve().parent.parent / "ui" / "app.py"


def _die_with_parent() -> None:
    """In the server's process, before streamlit starts: on Linux, ask for SIGTERM when `eas ui`
    dies, even by SIGKILL, so that no orphan server keeps the port."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def ui_command(
    storage: StorageOption = None,
    port: Annotated[int, typer.Option("--port", min=1, max=65535)] = 8501,
    host: Annotated[str, typer.Option("--host", help="Address to bind; 0.0.0.0 exposes it to other "
                                      "machines.")] = "127.0.0.1",
) -> None:
    """Start the Streamlit Pareto explorer (read-only; local-only unless --host says otherwise)."""
    try:
        import streamlit  # noqa: F401
    except ImportError:
        raise UserError("the explorer needs the ui extra: pip install 'eas[ui]'") from None
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise UserError(f"--host {host[:80]!r} is not an address this machine can bind") from None
    env = {**os.environ, "EAS_UI_STORAGE": storage or ""}
    if storage is None:
        from eas.study.storage import studies_dir

        env["EAS_STUDIES_DIR"] = str(studies_dir().resolve())
    command = [sys.executable, "-m", "streamlit", "run", str(APP), "--server.headless", "true",
               "--server.address", host, "--server.port", str(port), "--browser.gatherUsageStats", "false",
               "--client.toolbarMode", "viewer"]
    typer.echo(f"EAS explorer on http://{host}:{port}  (Ctrl-C to stop)", err=True)
    server = subprocess.Popen(command, env=env, preexec_fn=_die_with_parent)

    def stop(signum, frame) -> None:
        # Whoever stops `eas ui` (SIGTERM from a service manager or a test) stops the server too.
        server.terminate()

    signal.signal(signal.SIGTERM, stop)
    try:
        code = server.wait()
    except KeyboardInterrupt:
        server.terminate()
        code = 0
    try:
        server.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.kill()
    raise typer.Exit(0 if code in (0, -signal.SIGTERM) else code)
