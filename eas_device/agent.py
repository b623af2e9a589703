"""`eas-device serve`: an HTTP agent on the deployment target that times the ONNX models a search
sends it, one at a time, in ONNX Runtime, and nothing else.

    GET  /info                           what this device is: runtime, provider, CPU, limits, queue
    POST /measure?threads=1&batch=32     body: the ONNX model; answer: latencies, energy, provenance

Every request needs `Authorization: Bearer <token>`. The agent binds to 127.0.0.1 unless told
otherwise, refuses what is over its limits before running anything, and answers every refusal
with one line of JSON ({"error": ...}) and a status code: 401 token, 400 model or request, 413 size,
503 queue full, 504 the measurement ran over its time.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import platform
import secrets
import socket
import sys
import threading
import time
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import onnxruntime

from eas_device import __version__
from eas_device.energy import joules_of
from eas_device.measure import Limits, ModelRefused, checked_session, cpu_model, session, time_session

DEFAULT_PORT = 8765


class Refusal(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Agent:
    """One measurement at a time; at most `max_queued` waiting behind it, each at most `queue_wait` s."""

    def __init__(self, token: str, limits: Limits = Limits(), max_queued: int = 8, queue_wait: float = 600.0,
                 measure_timeout: float = 60.0, energy_seconds: float = 0.2):
        self.token, self.limits = token, limits
        self.max_queued, self.queue_wait = max_queued, queue_wait
        self.measure_timeout, self.energy_seconds = measure_timeout, energy_seconds
        self.busy = threading.Lock()
        self.queued = 0
        self.counting = threading.Lock()
        self.device = f"cpu:{cpu_model()} @ {socket.gethostname()}"

    def authorised(self, header: str | None) -> bool:
        given = (header or "").removeprefix("Bearer ").strip()
        return bool(given) and hmac.compare_digest(given.encode(), self.token.encode())

    def info(self) -> dict:
        return {"agent": f"eas-device {__version__}", "runtime": f"onnxruntime {onnxruntime.__version__}",
                "providers": onnxruntime.get_available_providers(), "device": self.device,
                "machine": platform.machine(), "cores": os.cpu_count(), "limits": asdict(self.limits),
                "queued": self.queued, "busy": self.busy.locked()}

    def measure(self, onnx: bytes, threads: int, batch: int) -> dict:
        with self.counting:
            if self.queued >= self.max_queued:
                raise Refusal(503, f"busy: {self.queued} measurements queued (the limit is {self.max_queued})")
            self.queued += 1
        try:
            if not self.busy.acquire(timeout=self.queue_wait):
                raise Refusal(503, f"busy: waited {self.queue_wait:.0f} s in the queue")
        finally:
            with self.counting:
                self.queued -= 1
        try:
            return self._measure_now(onnx, threads, batch)
        finally:
            self.busy.release()

    def _measure_now(self, onnx: bytes, threads: int, batch: int) -> dict:
        started = time.perf_counter()
        try:
            checked, sample = checked_session(onnx, threads, batch, self.limits)
        except ModelRefused as refused:
            raise Refusal(refused.status, str(refused)) from None
        sessions = iter([checked])  # the checked session is the first one timed
        # ONNX Runtime stops a run when its RunOptions are told to terminate: the watchdog's way to
        # end a measurement that runs over its time, so one model cannot hold the device.
        stop = onnxruntime.RunOptions()
        watchdog = threading.Timer(self.measure_timeout, lambda: setattr(stop, "terminate", True))
        watchdog.start()
        try:
            single, batched, run_batch, ran = time_session(lambda: next(sessions, None) or session(onnx, threads),
                                                           sample, batch, stop)
            joules, seconds, samples, source = joules_of(run_batch, self.energy_seconds)
        except Exception as error:
            if stop.terminate:
                raise Refusal(504, f"the measurement ran over {self.measure_timeout:.0f} s") from None
            raise Refusal(400, f"the model failed to run: {str(error).splitlines()[0][:200]}") from None
        finally:
            watchdog.cancel()
        return {"single": asdict(single), "batched": asdict(batched),
                "energy": {"joules_per_1k": joules * 1000 / samples, "seconds_per_1k": seconds * 1000 / samples,
                           "source": source},
                "provenance": {"runtime": f"onnxruntime {onnxruntime.__version__}",
                               "provider": ran.get_providers()[0], "threads": threads, "batch": [1, batch],
                               "device": self.device, "agent": f"eas-device {__version__}"},
                "seconds": time.perf_counter() - started}


def handler_for(agent: Agent) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = f"eas-device/{__version__}"

        def _reply(self, status: int, document: dict) -> None:
            body = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _serve(self, answer) -> None:
            try:
                if not agent.authorised(self.headers.get("Authorization")):
                    raise Refusal(401, "no or wrong token (Authorization: Bearer <token>)")
                self._reply(200, answer())
            except Refusal as refusal:
                self._reply(refusal.status, {"error": str(refusal)})
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client went away: nothing to answer

        def do_GET(self) -> None:
            if urlsplit(self.path).path != "/info":
                return self._reply(404, {"error": f"no such path {urlsplit(self.path).path!r}"})
            self._serve(agent.info)

        def do_POST(self) -> None:
            url = urlsplit(self.path)
            if url.path != "/measure":
                return self._reply(404, {"error": f"no such path {url.path!r}"})
            self._serve(lambda: agent.measure(self._body(), *self._numbers(url.query)))

        def _numbers(self, query: str) -> tuple[int, int]:
            fields = parse_qs(query)
            try:
                return int(fields.get("threads", ["1"])[0]), int(fields.get("batch", ["32"])[0])
            except ValueError:
                raise Refusal(400, "threads and batch must be whole numbers") from None

        def _body(self) -> bytes:
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                raise Refusal(411, "Content-Length required") from None
            if length > agent.limits.max_model_bytes:  # refused before a byte of it is read
                self.close_connection = True
                raise Refusal(413, f"model of {length:,} bytes is over the limit of "
                                   f"{agent.limits.max_model_bytes:,}")
            body = self.rfile.read(length)
            if len(body) != length:
                raise Refusal(400, "the body ended before its Content-Length")
            return body

        def log_message(self, format: str, *args) -> None:
            sys.stderr.write(f"eas-device: {self.address_string()} {format % args}\n")

    return Handler


def serve(agent: Agent, host: str = "127.0.0.1", port: int = DEFAULT_PORT, ready=None) -> None:
    server = ThreadingHTTPServer((host, port), handler_for(agent))
    server.daemon_threads = True
    print(f"eas-device: serving {agent.device} on http://{host}:{server.server_address[1]} "
          f"(onnxruntime {onnxruntime.__version__})", file=sys.stderr, flush=True)
    if ready:
        ready(server)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def token_from_environment() -> str:
    """$EAS_DEVICE_TOKEN, or a fresh random token (printed once) when it is unset."""
    token = os.environ.get("EAS_DEVICE_TOKEN", "").strip()
    if token:
        return token
    token = secrets.token_urlsafe(24)
    print(f"eas-device: EAS_DEVICE_TOKEN is unset; this agent's token is {token}", file=sys.stderr)
    return token


def serve_from_options(host: str, port: int, max_model_mb: float, timeout: float) -> None:
    """What `eas-device serve` and `eas device serve` both run; OSError when the address is taken."""
    limits = Limits(max_model_bytes=int(max_model_mb * 2**20))
    serve(Agent(token_from_environment(), limits, measure_timeout=timeout), host, port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="eas-device", description="Time ONNX models for EAS searches.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("serve", help="serve measurements over HTTP")
    run.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    run.add_argument("--port", type=int, default=DEFAULT_PORT)
    run.add_argument("--max-model-mb", type=float, default=64.0)
    run.add_argument("--timeout", type=float, default=60.0, help="seconds one measurement may take")
    options = parser.parse_args(argv)
    try:
        serve_from_options(options.host, options.port, options.max_model_mb, options.timeout)
    except OSError as error:
        print(f"eas-device: error: cannot serve on {options.host}:{options.port}: {error.strerror}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
