"""`eas-agent serve`: an HTTP agent on the deployment target that times the ONNX models a search
sends it, one at a time, in ONNX Runtime, and nothing else.

    GET  /info                           what this device is: runtime, provider, CPU, limits, queue
    POST /measure?threads=1&batch=32     body: the ONNX model; answer: latencies, energy, provenance

Every request needs `Authorization: Bearer <token>`. The agent binds to 127.0.0.1 unless told
otherwise, refuses what is over its limits before running anything, and answers every refusal
with one line of JSON ({"error": ...}) and a status code: 401 token, 400 model or request, 413 size
or memory, 503 busy, 504 the measurement (loading included) ran over its time.

What it promises, with or without a token (each promise is tested):
- memory: a model is loaded and timed in a separate measuring process (eas_agent.worker) whose
  address space may grow by at most --max-memory-mb (default: half of the machine's memory); a
  model that needs more is refused (413) and
  the agent itself never holds more than (queue + 1) bodies of at most --max-model-mb each;
- time: --timeout seconds for a whole measurement, loading included (the measuring process is
  killed and started again); a request must arrive whole within REQUEST_SECONDS, and any 10 s
  without a byte ends the connection;
- connections: at most --max-connections at once (a further one is answered 503 at once), a
  listen backlog of 128, so a burst is answered rather than reset.
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import json
import math
import os
import platform
import secrets
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import onnxruntime

from eas_agent import __version__, client
from eas_agent.measure import Limits, cpu_model

DEFAULT_PORT = 8765
REQUEST_SECONDS = 120.0  # a request (headers and body) must arrive whole within this
IDLE_SECONDS = 10.0  # and no pause between its bytes may be longer
STARTUP_SECONDS = 120.0  # the measuring process's own start (libraries loading)
INFO, MEASURE = "/info", "/measure"
PATHS = (INFO, MEASURE)  # what the agent answers; any other path is logged by its length only


class Refusal(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def half_the_memory_mb() -> float:
    """The default memory limit of one measurement: half of this machine's physical memory (a
    model that needs more would push the board into swap or the OOM killer)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**21
    except (ValueError, OSError):
        return 1024.0


@dataclass(frozen=True)
class ServeOptions:
    """What both faces (`eas-agent serve`, `eas agent serve`) accept, checked in one place."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    max_model_mb: float = 64.0
    timeout: float = 60.0
    max_memory_mb: float = field(default_factory=half_the_memory_mb)
    max_connections: int = 32

    def __post_init__(self) -> None:
        for name, low, high in (("max_model_mb", 0.001, 4096), ("timeout", 1, 3600), ("max_memory_mb", 16, 2**20)):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and low <= value <= high):
                raise ValueError(f"--{name.replace('_', '-')} must be a number from {low:g} to {high:g} "
                                 f"(got {value!r})")
        if not 1 <= self.port <= 65535:
            raise ValueError(f"--port must be 1..65535 (got {self.port})")
        if not 1 <= self.max_connections <= 4096:
            raise ValueError(f"--max-connections must be 1..4096 (got {self.max_connections})")


class MeasuringProcess:
    """The agent's measuring process (eas_agent.worker), started at once and again after it was
    killed: a model is loaded and timed there, under a memory limit and a time limit that covers
    loading, so no model can take the agent's memory or its only measurement slot for long."""

    def __init__(self, limits: Limits, max_memory_bytes: int):
        self.limits, self.max_memory_bytes = limits, max_memory_bytes
        self.process: subprocess.Popen | None = None
        self._start()

    def _start(self) -> None:
        settings = json.dumps({"limits": asdict(self.limits), "max_memory_bytes": self.max_memory_bytes})
        self.process = subprocess.Popen([sys.executable, "-m", "eas_agent.worker", settings], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE)
        ready = self._line(time.monotonic() + STARTUP_SECONDS)
        if not ready:
            self.stop()
            raise Refusal(503, "the measuring process did not start")

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
            for stream in (self.process.stdin, self.process.stdout):
                stream.close()
            self.process = None

    def _line(self, deadline: float) -> bytes | None:
        """One line from the process; b"" when it died, None when the deadline passed first."""
        out, chunks = self.process.stdout.fileno(), []
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                return None
            chunk = os.read(out, 65536)
            if not chunk:
                return b""
            chunks.append(chunk)
            if chunk.endswith(b"\n"):
                return b"".join(chunks)

    def measure(self, onnx: bytes, threads: int, batch: int, energy_seconds: float, timeout: float) -> dict:
        if self.process is None or self.process.poll() is not None:
            self.stop()
            self._start()
        deadline = time.monotonic() + timeout
        request = {"threads": threads, "batch": batch, "energy_seconds": energy_seconds, "length": len(onnx)}
        try:
            self.process.stdin.write(json.dumps(request).encode() + b"\n" + onnx)
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            line = b""
        else:
            line = self._line(deadline)
        if line is None:
            self.stop()
            raise Refusal(504, f"the measurement ran over {timeout:g} s (loading included)")
        if not line:
            code = self.process.wait() if self.process else None
            self.stop()
            how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            raise Refusal(413, f"the measuring process died loading or running the model ({how}): it probably "
                               f"needs more memory than the agent's limit ({self.max_memory_bytes // 2**20} MB)")
        answer = json.loads(line)
        if "result" not in answer:
            raise Refusal(int(answer["status"]), str(answer["error"]))
        return answer["result"]


class Agent:
    """One measurement at a time; at most `max_queued` waiting behind it, each at most `queue_wait` s."""

    def __init__(self, token: str, limits: Limits = Limits(), max_queued: int = 4, queue_wait: float = 600.0,
                 measure_timeout: float = 60.0, energy_seconds: float = 0.2, max_memory_bytes: int = 2**30):
        self.token, self.limits = token, limits
        self.max_queued, self.queue_wait = max_queued, queue_wait
        self.measure_timeout, self.energy_seconds = measure_timeout, energy_seconds
        self.max_memory_bytes = max_memory_bytes
        self.busy = threading.Lock()
        self.queued = 0
        self.counting = threading.Lock()
        self.device = f"cpu:{cpu_model()} @ {socket.gethostname()}"
        self.measuring = MeasuringProcess(limits, max_memory_bytes)

    def authorised(self, header: str | None) -> bool:
        given = (header or "").removeprefix("Bearer ").strip()
        return bool(given) and hmac.compare_digest(given.encode(), self.token.encode())

    def info(self) -> dict:
        return {"agent": f"eas-agent {__version__}", "runtime": f"onnxruntime {onnxruntime.__version__}",
                "providers": onnxruntime.get_available_providers(), "device": self.device,
                "machine": platform.machine(), "cores": os.cpu_count(),
                "limits": {**asdict(self.limits), "max_memory_bytes": self.max_memory_bytes,
                           "timeout_seconds": self.measure_timeout},
                "queued": self.queued, "busy": self.busy.locked()}

    def measure(self, onnx, threads: int, batch: int) -> dict:
        """Measure `onnx` (bytes, or a function reading them: a body is read only once it has a
        place in the queue, so the agent holds at most (queue + 1) models)."""
        with self.counting:
            if self.queued >= self.max_queued:
                raise Refusal(503, f"busy: {self.queued} measurements queued (the limit is {self.max_queued})")
            self.queued += 1
        try:
            onnx = onnx() if callable(onnx) else onnx
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
        if len(onnx) > self.limits.max_model_bytes:
            raise Refusal(413, f"model of {len(onnx):,} bytes is over the limit of {self.limits.max_model_bytes:,}")
        answer = self.measuring.measure(onnx, threads, batch, self.energy_seconds, self.measure_timeout)
        answer["provenance"].update(device=self.device, agent=f"eas-agent {__version__}")
        return answer

    def close(self) -> None:
        self.measuring.stop()


_CONTROL = {code: f"\\x{code:02x}" for code in (*range(32), 127)}


def printable(text: str) -> str:
    """Text for the log: control characters escaped (a request line is the client's bytes)."""
    return text.translate(_CONTROL)


def handler_for(agent: Agent) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = f"eas-agent/{__version__}"
        timeout = IDLE_SECONDS  # any pause this long between a client's bytes ends the connection

        def setup(self) -> None:
            super().setup()
            # The whole request must arrive within REQUEST_SECONDS: a client that trickles bytes
            # cannot hold a connection for ever. Cancelled once the request is read.
            self.server.deadlines.add(self.connection, REQUEST_SECONDS)

        def _request_read(self) -> None:
            self.server.deadlines.cancel(self.connection)

        def finish(self) -> None:
            self._request_read()
            with contextlib.suppress(OSError):  # the client went away
                super().finish()

        def handle(self) -> None:
            with contextlib.suppress(OSError, ValueError):  # reset, cut or timed out: nothing to answer or log
                super().handle()

        def _reply(self, status: int, document: dict) -> None:
            body = json.dumps(document).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                self.close_connection = True  # the client hung up before the answer: nothing to do

        def _serve(self, answer) -> None:
            try:
                if not agent.authorised(self.headers.get("Authorization")):
                    raise Refusal(401, "no or wrong token (Authorization: Bearer <token>)")
                result = answer()
            except Refusal as refusal:
                self._request_read()
                return self._reply(refusal.status, {"error": str(refusal)})
            self._reply(200, result)

        def do_GET(self) -> None:
            if urlsplit(self.path).path != INFO:
                return self._reply(404, {"error": f"no such path {printable(urlsplit(self.path).path)[:100]!r}"})
            self._request_read()
            self._serve(agent.info)

        def do_POST(self) -> None:
            url = urlsplit(self.path)
            if url.path != MEASURE:
                self.close_connection = True  # its body, if any, is not read
                return self._reply(404, {"error": f"no such path {printable(url.path)[:100]!r}"})
            self._serve(lambda: agent.measure(self._body, *self._numbers(url.query)))

        def _numbers(self, query: str) -> tuple[int, int]:
            fields = parse_qs(query)
            try:
                return int(fields.get("threads", ["1"])[0]), int(fields.get("batch", ["32"])[0])
            except ValueError:
                raise Refusal(400, "threads and batch must be whole numbers") from None

        def _body(self) -> bytes:
            """The model, read once it has a place in the queue; a size over the limit (or none
            that makes sense) is refused before a byte of it is read."""
            self.close_connection = True  # one request per connection: a refusal leaves no body behind
            text = self.headers.get("Content-Length", "")
            if not text.strip().isdigit():
                raise Refusal(411 if not text else 400, "Content-Length must be a whole number of bytes"
                              if text else "Content-Length required")
            length = int(text)
            if length > agent.limits.max_model_bytes:
                raise Refusal(413, f"model of {length:,} bytes is over the limit of "
                                   f"{agent.limits.max_model_bytes:,}")
            body = self.rfile.read(length)
            self._request_read()  # the request is whole; the measurement has its own time limit
            if len(body) != length:
                raise Refusal(400, "the body ended before its Content-Length")
            return body

        def log_request(self, code="-", size="-") -> None:
            # Only the agent's own paths, without their query: a client may put a token anywhere in a
            # request line (`GET /<token>`), and it must not reach the log.
            path = urlsplit(self.path).path if hasattr(self, "path") else "?"
            path = path if path in PATHS else f"(another path, {len(path)} characters)"
            self.log_message('"%s %s" %s', getattr(self, "command", "?"), path, code)

        def log_message(self, format: str, *args) -> None:
            sys.stderr.write(f"eas-agent: {self.address_string()} {printable(format % args)}\n")

    return Handler


class Deadlines:
    """One thread that cuts each connection whose request is still arriving at its deadline: a
    timer thread per connection would double the threads a burst of slow clients costs."""

    def __init__(self) -> None:
        self._due: dict[socket.socket, float] = {}
        self._changed = threading.Condition()
        threading.Thread(target=self._watch, name="request-deadlines", daemon=True).start()

    def add(self, connection: socket.socket, seconds: float) -> None:
        with self._changed:
            self._due[connection] = time.monotonic() + seconds
            self._changed.notify()

    def cancel(self, connection: socket.socket) -> None:
        with self._changed:
            self._due.pop(connection, None)

    def _watch(self) -> None:
        with self._changed:
            while True:
                now = time.monotonic()
                for connection in [c for c, due in self._due.items() if due <= now]:
                    del self._due[connection]
                    with contextlib.suppress(OSError):
                        connection.shutdown(socket.SHUT_RDWR)
                self._changed.wait(min(self._due.values(), default=now + 60.0) - now)


_BUSY_BODY = json.dumps({"error": "busy: too many connections at once"}).encode()
BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY))


class AgentServer(ThreadingHTTPServer):
    """A thread per connection, at most `max_connections` of them; one more is answered 503 at
    once instead of queueing behind the others, and a burst finds a backlog of 128."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address, handler, max_connections: int = 32):
        self.slots = threading.BoundedSemaphore(max_connections)
        self.deadlines = Deadlines()
        super().__init__(address, handler)

    def process_request(self, request, client_address) -> None:
        if not self.slots.acquire(blocking=False):
            try:
                request.settimeout(1.0)
                request.sendall(BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def serve(agent: Agent, host: str = "127.0.0.1", port: int = DEFAULT_PORT, ready=None,
          max_connections: int = 32) -> None:
    server = AgentServer((host, port), handler_for(agent), max_connections)
    print(f"eas-agent: serving {agent.device} on http://{host}:{server.server_address[1]} "
          f"(onnxruntime {onnxruntime.__version__})", file=sys.stderr, flush=True)
    if ready:
        ready(server)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        agent.close()


def token_from_environment() -> str:
    """$EAS_AGENT_TOKEN, or a fresh random token (printed once) when it is unset."""
    token = client.token()
    if token:
        return token
    token = secrets.token_urlsafe(24)
    print(f"eas-agent: EAS_AGENT_TOKEN is unset; this agent's token is {token}", file=sys.stderr)
    return token


def serve_from_options(options: ServeOptions) -> None:
    """What `eas-agent serve` and `eas device serve` both run; OSError when the address is taken."""
    limits = Limits(max_model_bytes=int(options.max_model_mb * 2**20))
    agent = Agent(token_from_environment(), limits, measure_timeout=options.timeout,
                  max_memory_bytes=int(options.max_memory_mb * 2**20))
    serve(agent, options.host, options.port, max_connections=options.max_connections)


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = ServeOptions()
    parser.add_argument("--host", default=defaults.host, help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=defaults.port)
    parser.add_argument("--max-model-mb", type=float, default=defaults.max_model_mb, help="largest model accepted")
    parser.add_argument("--timeout", type=float, default=defaults.timeout,
                        help="seconds one measurement may take, loading included")
    parser.add_argument("--max-memory-mb", type=float, default=defaults.max_memory_mb,
                        help="memory loading and timing one model may take (default: half of this machine's)")
    parser.add_argument("--max-connections", type=int, default=defaults.max_connections,
                        help="connections served at once; more are answered 503")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="eas-agent", description="Time ONNX models for EAS searches.")
    commands = parser.add_subparsers(dest="command", required=True)
    add_serve_arguments(commands.add_parser("serve", help="serve measurements over HTTP"))
    given = parser.parse_args(argv)
    try:
        options = ServeOptions(given.host, given.port, given.max_model_mb, given.timeout, given.max_memory_mb,
                               given.max_connections)
    except ValueError as error:
        print(f"eas-agent: error: {error}", file=sys.stderr)
        return 2
    try:
        serve_from_options(options)
    except OSError as error:
        print(f"eas-agent: error: cannot serve on {options.host}:{options.port}: {error.strerror or error}",
              file=sys.stderr)
        return 2
    except Refusal as error:
        print(f"eas-agent: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
