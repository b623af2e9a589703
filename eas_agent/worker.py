"""The agent's measuring process: it loads and times one model at a time, under a memory limit,
so that a model whose loading would take the machine's memory (constant folding can build a
gigabyte from a 212-byte file) or time is refused and the agent goes on serving.

The agent (eas_agent.agent.MeasuringProcess) starts it, sends each request as one JSON line
(threads, batch, energy seconds, model size) followed by the model's bytes, and reads one JSON
line back: {"result": {...}} or {"status": N, "error": "..."}. When a measurement runs over its
time, the agent kills this process (loading included) and starts another.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from dataclasses import asdict


def _virtual_bytes() -> int:
    """This process's virtual memory size now (VmSize)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def limit_memory(max_bytes: int) -> None:
    """At most `max_bytes` of address space beyond what this process holds once its libraries are
    loaded: an allocation past it fails (a refusal), it does not grow the machine into swap."""
    if max_bytes > 0:
        ceiling = _virtual_bytes() + max_bytes
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:  # started under `ulimit -v`: a limit may be lowered, never raised
            ceiling = min(ceiling, hard)
        resource.setrlimit(resource.RLIMIT_AS, (ceiling, ceiling))


def measure(onnx: bytes, threads: int, batch: int, energy_seconds: float, limits) -> dict:
    import onnxruntime

    from eas_agent.energy import joules_of
    from eas_agent.measure import checked_session, session, time_session

    started = time.perf_counter()
    checked, sample = checked_session(onnx, threads, batch, limits)
    sessions = iter([checked])  # the checked session is the first one timed
    single, batched, run_batch, ran = time_session(lambda: next(sessions, None) or session(onnx, threads), sample,
                                                   batch)
    joules, seconds, samples, source = joules_of(run_batch, energy_seconds)
    return {"single": asdict(single), "batched": asdict(batched),
            "energy": {"joules_per_1k": joules * 1000 / samples, "seconds_per_1k": seconds * 1000 / samples,
                       "source": source},
            "provenance": {"runtime": f"onnxruntime {onnxruntime.__version__}", "provider": ran.get_providers()[0],
                           "threads": threads, "batch": [1, batch]},
            "seconds": time.perf_counter() - started}


def serve(stdin, stdout, limits, max_memory_bytes: int) -> None:
    import onnxruntime  # loaded before the limit is set: its libraries are not the model's

    from eas_agent.measure import ModelRefused

    onnxruntime.set_default_logger_severity(4)  # a failure is answered to the client, not logged here
    limit_memory(max_memory_bytes)
    stdout.write(json.dumps({"ready": True}) + "\n")
    stdout.flush()
    while True:
        line = stdin.readline()
        if not line:
            return
        request = json.loads(line)
        onnx = stdin.read(request["length"])
        too_large = {"status": 413, "error": "loading or running the model needs more memory than the agent's "
                                             f"limit ({max_memory_bytes // 2**20} MB)"}
        try:
            answer = {"result": measure(onnx, request["threads"], request["batch"], request["energy_seconds"],
                                        limits)}
        except MemoryError:
            answer = too_large
        except Exception as error:  # ONNX Runtime's own failure (out of memory included) is one line
            whole = str(error)
            if any(mark in whole for mark in ("bad_alloc", "bad allocation", "Failed to allocate")):
                answer = too_large
            elif isinstance(error, ModelRefused):
                answer = {"status": error.status, "error": whole}
            else:
                text = whole.splitlines()[0][:200] if whole else type(error).__name__
                answer = {"status": 400, "error": f"the model failed to load or run: {text}"}
        stdout.write(json.dumps(answer) + "\n")
        stdout.flush()


def main() -> None:
    from eas_agent.measure import Limits

    settings = json.loads(sys.argv[1])
    serve(sys.stdin.buffer, sys.stdout, Limits(**settings["limits"]), settings["max_memory_bytes"])


if __name__ == "__main__":
    main()
