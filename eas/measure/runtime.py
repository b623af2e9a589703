"""Latency and inference energy in the runtime a model ships with.

Eager PyTorch at batch 1 measures mostly its own per-module overhead: measured here, 4.3-6.5x
ONNX Runtime's time for the same mobile-space networks, ranking them by their number of modules
rather than by their work. So by default a candidate is exported to ONNX the way `eas export`
ships it (eval mode, a dynamic batch axis) and timed in ONNX Runtime with a fixed number of
threads (graph optimisations on: BatchNorm is folded into the convolutions), at batch 1 and at
a larger batch; its inference energy is metered on that same session. Every number carries
where it came from: runtime and version, execution provider, threads, batch, CPU or GPU model.
`--runtime torch` keeps eager PyTorch (what studies made before runtimes were recorded used).

With an agent URL (--target) the exported graph is sent to an agent (eas-agent) on the deployment target
(eas_agent.agent), which times it with the same code (eas_agent.measure) on its own hardware.
A latency predictor fitted for that target and runtime (eas.measure.predictor) rides along in
the runtime's settings: the search then refuses proposals by predicted latency and measures the
candidates that reach the top rung.
"""

from __future__ import annotations

import io
import json
import math
import warnings
from dataclasses import asdict, dataclass, replace

import torch
from torch import nn

from eas.errors import UserError
from eas.lazy import available, lazy_import
from eas.measure.energy import EnergyReading, Meter, measure_repeated
from eas.measure.inference import Latency, inference_energy, latency
from eas.measure.predictor import Predictor, load_predictor
from eas_agent import client
from eas_agent.measure import cpu_model, session, time_session

onnxruntime = lazy_import("onnxruntime")

RUNTIMES = ("onnxruntime", "torch")


@dataclass(frozen=True)
class Runtime:
    """Where a study's latencies and inference energies are measured."""

    name: str = "onnxruntime"
    threads: int | None = 1  # onnxruntime's intra-op threads; torch uses the process's own
    batch: int = 32  # the larger batch timed besides batch 1
    target: str | None = None  # the URL of the agent on the deployment target; None: this machine
    predictor: dict | None = None  # a fitted latency predictor for this runtime (eas.measure.predictor)

    @classmethod
    def parse(cls, name: str, threads: int, batch: int, target: str | None = None) -> Runtime:
        if name not in RUNTIMES:
            raise UserError(f"unknown runtime {name!r} (known: {', '.join(RUNTIMES)})")
        if not 1 <= threads <= 256:
            raise UserError(f"--runtime-threads must be 1..256 (got {threads})")
        if not 2 <= batch <= 4096:
            raise UserError(f"--runtime-batch must be 2..4096 (got {batch})")
        if name == "onnxruntime" and not available("onnxruntime"):
            raise UserError("--runtime onnxruntime needs onnxruntime: pip install onnxruntime (or --runtime torch)")
        if target is not None:
            if name != "onnxruntime":
                raise UserError("an agent measures in ONNX Runtime on its target: drop --runtime torch")
            try:
                target = client.check_url(target)
            except ValueError as error:
                raise UserError(str(error)) from None
        return cls(name, threads if name == "onnxruntime" else None, batch, target)

    def to_dict(self) -> dict:
        # the target's URL is stored under its first name, "device": studies read by older EAS alike
        stored = asdict(self)
        stored["device"] = stored.pop("target")
        return stored

    @classmethod
    def from_dict(cls, data: dict | None) -> Runtime:
        """As stored in a study; a study stored before runtimes were recorded timed eager torch."""
        if not data:
            return cls("torch", None, 32)
        return cls(str(data.get("name")), data.get("threads"), int(data.get("batch", 32)), data.get("device"),
                   data.get("predictor"))


def with_predictor(runtime: Runtime, path) -> Runtime:
    """`runtime` with the predictor stored at `path`, refused in one line when it was fitted for
    another runtime, thread count or target."""
    predictor = load_predictor(path)
    fitted = predictor.runtime
    if runtime.name != "onnxruntime" or fitted.get("threads") != runtime.threads or \
            fitted.get("url") != runtime.target:
        where = fitted.get("url") or "this machine"
        raise UserError(f"--predictor {path} was fitted for ONNX Runtime at {fitted.get('threads')} thread(s) on "
                        f"{where}; this search measures {runtime.name} at {runtime.threads} thread(s) on "
                        f"{runtime.target or 'this machine'}")
    return replace(runtime, predictor=json.loads(json.dumps(predictor.to_dict())))  # as the study stores it


def check_reachable(runtime: Runtime, input_shape: tuple[int, int, int], num_classes: int, space=None) -> None:
    """Before a search starts: the agent answers and takes our token, and the predictor was
    fitted for this input shape and number of classes (one line each, exit 2)."""
    if runtime.target:
        agent_wait()  # a nonsense $EAS_AGENT_WAIT is refused now, not when a trial waits
        try:
            client.info(runtime.target)
        except client.AgentError as error:
            raise UserError(str(error)) from None
    predictor = runtime.predictor
    if predictor and (tuple(predictor["input_shape"]), predictor["num_classes"]) != (tuple(input_shape), num_classes):
        raise UserError(f"the latency predictor was fitted for input {tuple(predictor['input_shape'])} and "
                        f"{predictor['num_classes']} classes; this data has {tuple(input_shape)} and {num_classes}")
    if predictor and space is not None:
        Predictor.from_dict(predictor).check_fits(space.name, list(space.extremes(input_shape, num_classes)))


MAX_AGENT_WAIT = 24 * 3600.0


def agent_wait() -> float:
    """Seconds a measurement waits for an agent that went away before its trial is stored without
    a latency (and the reason): $EAS_AGENT_WAIT, default 300, at most a day."""
    text = client.setting("WAIT", "300")
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and 0 <= seconds <= MAX_AGENT_WAIT):
        raise UserError(f"EAS_AGENT_WAIT must be a number of seconds from 0 to {MAX_AGENT_WAIT:.0f} "
                        f"(got {text[:40]!r})")
    return seconds


def to_onnx(model: nn.Module, example: torch.Tensor, target) -> None:
    """Export `model` (eval mode) to ONNX, batch axis dynamic: the one exporter of `eas export`
    and of the search's measurements, so a stored latency is the shipped graph's."""
    model.eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (example,), target, input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, dynamo=False)


@dataclass(frozen=True)
class Measured:
    single: Latency
    batched: Latency
    energy: EnergyReading  # per 1000 samples
    provenance: dict  # runtime, version, provider, threads, batch sizes, device


def measure(model: nn.Module, input_shape: tuple[int, int, int], runtime: Runtime, device: torch.device,
            meter: Meter, energy_seconds: float = 0.2) -> Measured:
    """Latency at batch 1 and `runtime.batch`, and inference energy per 1000 samples, in `runtime`."""
    label = f"cuda:{torch.cuda.get_device_name(device)}" if device.type == "cuda" else f"cpu:{cpu_model()}"
    if runtime.name == "torch":
        single = latency(model, input_shape, device, batch=1, repeats=20, max_seconds=0.15)
        batched = latency(model, input_shape, device, batch=runtime.batch, warmup=1, repeats=3)
        energy = inference_energy(model, input_shape, device, meter, batch=runtime.batch, min_seconds=energy_seconds)
        provenance = {"runtime": f"torch {torch.__version__} (eager)", "provider": device.type,
                      "threads": torch.get_num_threads(), "batch": [1, runtime.batch], "device": label}
        return Measured(single, batched, energy, provenance)
    buffer = io.BytesIO()
    to_onnx(model, torch.zeros(1, *input_shape, device=device), buffer)
    if runtime.target:
        return measure_on_target(buffer.getvalue(), runtime)
    onnx, cuda = buffer.getvalue(), device.type == "cuda"
    single, batched, run_batch, ran = time_session(lambda: session(onnx, runtime.threads, cuda), input_shape,
                                                   runtime.batch)
    reading, samples = measure_repeated(meter, run_batch, energy_seconds)
    energy = EnergyReading(reading.joules * 1000 / samples, reading.seconds * 1000 / samples, reading.source)
    provenance = {"runtime": f"onnxruntime {onnxruntime.__version__}", "provider": ran.get_providers()[0],
                  "threads": runtime.threads, "batch": [1, runtime.batch], "device": label}
    return Measured(single, batched, energy, provenance)


def measure_on_target(onnx: bytes, runtime: Runtime) -> Measured:
    """The agent's measurement of `onnx` on the deployment target; waits for an agent that went
    away (eas_agent.client), then raises AgentError with the reason."""
    answer = client.measure(runtime.target, onnx, runtime.threads, runtime.batch, wait=agent_wait())
    return checked_answer(answer, runtime)


MAX_LATENCY_MS = 3.6e6  # an hour for one inference: beyond it, an answer is not a measurement
MAX_TEXT = 200  # characters of a runtime, provider or device name


class Untrusted(client.AgentError):
    """An agent's answer that is not a measurement EAS can store (junk, out of range, disordered)."""


def _number(value, what: str, low: float, high: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise Untrusted(f"{what} is not a finite number ({str(value)[:40]!r})")
    if not low <= value <= high:
        raise Untrusted(f"{what} {value:.4g} is outside {low:g}..{high:g}")
    return float(value)


def _text(value, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT or not value.isprintable():
        raise Untrusted(f"{what} is not a short printable text ({str(value)[:40]!r})")
    return value


def _latency(answer, what: str, batch: int) -> Latency:
    if not isinstance(answer, dict):
        raise Untrusted(f"{what} is missing")
    if answer.get("batch") != batch or isinstance(answer.get("batch"), bool):
        raise Untrusted(f"{what} was timed at batch {str(answer.get('batch'))[:20]}, not {batch}")
    median, p10, p90 = (_number(answer.get(key), f"{what} {key}", 1e-6, MAX_LATENCY_MS)
                        for key in ("median_ms", "p10_ms", "p90_ms"))
    if not p10 <= median <= p90:
        raise Untrusted(f"{what} percentiles are out of order (p10 {p10:.4g}, median {median:.4g}, p90 {p90:.4g} ms)")
    repeats = answer.get("repeats")
    if not isinstance(repeats, int) or isinstance(repeats, bool) or not 1 <= repeats <= 10**6:
        raise Untrusted(f"{what} repeats is not a count ({str(repeats)[:20]!r})")
    return Latency(batch, median, p10, p90, repeats)


def checked_answer(answer, runtime: Runtime) -> Measured:
    """An agent's answer is input: every field finite, positive, ordered, bounded, printable, and
    for the threads and batch asked; anything else is a failed measurement with the reason."""
    try:
        if not isinstance(answer, dict):
            raise Untrusted("the answer is not a JSON object")
        single = _latency(answer.get("single"), "batch-1 latency", 1)
        batched = _latency(answer.get("batched"), "batched latency", runtime.batch)
        energy = answer.get("energy") if isinstance(answer.get("energy"), dict) else {}
        source = energy.get("source")
        if source not in ("rapl", "nvml", "estimated"):
            raise Untrusted(f"energy source {str(source)[:40]!r} is not rapl, nvml or estimated")
        reading = EnergyReading(_number(energy.get("joules_per_1k"), "energy per 1000 samples", 0.0, 1e9),
                                _number(energy.get("seconds_per_1k"), "seconds per 1000 samples", 0.0, 1e9), source)
        given = answer.get("provenance") if isinstance(answer.get("provenance"), dict) else {}
        provenance = {key: _text(given.get(key), f"provenance {key}") for key in ("runtime", "provider", "device")}
        if given.get("threads") != runtime.threads or given.get("batch") != [1, runtime.batch]:
            raise Untrusted(f"it measured at {str(given.get('threads'))[:10]} thread(s) and batches "
                            f"{str(given.get('batch'))[:20]}, not {runtime.threads} and [1, {runtime.batch}]")
    except Untrusted as error:
        raise Untrusted(f"the agent at {runtime.target} answered a measurement EAS cannot trust: {error}") from None
    return Measured(single, batched, reading, {**provenance, "threads": runtime.threads, "batch": [1, runtime.batch],
                                              "url": runtime.target, "energy": reading.source})
