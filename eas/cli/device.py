"""`eas device serve | info | calibrate`: the deployment target in the loop.

`serve` runs the measuring agent (eas_device.agent; the target needs only `pip install ./eas_device`,
no torch and no EAS); `info` asks an agent what it is; `calibrate` measures a sample of a space's
networks there (or on this machine) and fits the latency predictor `eas search --predictor` uses.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from eas.cli.options import DataOption, SeedOption, emit_json
from eas.errors import UserError
from eas.lazy import lazy_import

agent = lazy_import("eas_device.agent")
client = lazy_import("eas_device.client")
space_files = lazy_import("eas.arch.space")
datasets = lazy_import("eas.data.datasets")
runtimes = lazy_import("eas.measure.runtime")
calibration = lazy_import("eas.measure.calibration")
predictors = lazy_import("eas.measure.predictor")

UrlOption = Annotated[str, typer.Option("--device", help="The agent's URL, e.g. http://pi.local:8765 (token from "
                                        "$EAS_DEVICE_TOKEN).")]


def serve_command(
    host: Annotated[str, typer.Option("--host", help="Address to bind; 0.0.0.0 serves the network.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port")] = 8765,
    max_model_mb: Annotated[float, typer.Option("--max-model-mb", help="Largest model accepted.")] = 64.0,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds one measurement may take, loading "
                                           "included.")] = 60.0,
    max_memory_mb: Annotated[float | None, typer.Option("--max-memory-mb", help="Memory loading and timing one "
                                                        "model may take (default: half of this machine's).")] = None,
    max_connections: Annotated[int, typer.Option("--max-connections", help="Connections served at once; more are "
                                                 "answered 503.")] = 32,
) -> None:
    """Serve measurements to searches on this machine (the deployment target): ONNX Runtime only."""
    try:  # the same checks as the standalone `eas-device serve`
        options = agent.ServeOptions(host, port, max_model_mb, timeout,
                                     agent.half_the_memory_mb() if max_memory_mb is None else max_memory_mb,
                                     max_connections)
    except ValueError as error:
        raise UserError(str(error)) from None
    try:
        agent.serve_from_options(options)
    except OSError as error:
        raise UserError(f"cannot serve on {host}:{port}: {error.strerror or error}") from None
    except agent.Refusal as error:
        raise UserError(str(error)) from None


def info_command(device: UrlOption, json_output: Annotated[bool, typer.Option("--json")] = False) -> None:
    """What the agent at --device is: runtime, provider, CPU, limits, queue."""
    try:
        answer = client.info(device)
    except (ValueError, client.DeviceError) as error:
        raise UserError(str(error)) from None
    if json_output:
        return emit_json(answer)
    for key in ("agent", "runtime", "providers", "device", "cores", "queued"):
        typer.echo(f"{key:10}{answer.get(key)}")


def _default_out(space: str, device: str | None, threads: int) -> Path:
    where = re.sub(r"[^A-Za-z0-9.-]+", "-", device.split("://", 1)[1]) if device else "local"
    return Path("studies") / "predictors" / f"{Path(space).stem}-{where}-{threads}t.json"


def calibrate_command(
    device: Annotated[str | None, typer.Option("--device", help="An agent's URL; omitted: this machine.")] = None,
    space: Annotated[str, typer.Option("--space", help="Space name or YAML file.")] = "mobile",
    data: DataOption = "fashion-mnist",
    n: Annotated[int, typer.Option("--n", help="Networks to measure (a fifth is held out).", min=20,
                                   max=5000)] = 200,
    threads: Annotated[int, typer.Option("--threads", help="ONNX Runtime threads, as the search will use.",
                                         min=1, max=256)] = 1,
    out: Annotated[Path | None, typer.Option("--out", help="Where to write the predictor (JSON).")] = None,
    seed: SeedOption = 0,
) -> None:
    """Measure --n random networks of a space and fit the latency predictor for that device."""
    runtime = runtimes.Runtime.parse("onnxruntime", threads, 32, device)
    loaded = space_files.load_space(space)
    task = datasets.load_dataset(data, seed=seed)
    loaded = loaded.for_task(task.input_shape)
    target = out or _default_out(space, runtime.device, threads)
    if target.exists() and not target.is_file():
        raise UserError(f"--out {target} is not a file")
    if runtime.device:
        try:
            client.info(runtime.device)
        except client.DeviceError as error:
            raise UserError(str(error)) from None
    began = time.monotonic()

    def progress(done: int, total: int, latency_ms: float) -> None:
        print(f"\rmeasured {done}/{total} (last {latency_ms:.3f} ms, {time.monotonic() - began:.0f} s)",
              end="", file=sys.stderr, flush=True)

    try:
        predictor = calibration.calibrate(loaded, task.input_shape, task.num_classes, runtime, n, seed, progress)
    except client.DeviceError as error:
        raise UserError(str(error)) from None
    print(file=sys.stderr)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.with_name(f".{target.name}.{os.getpid()}")
    scratch.write_text(json.dumps(predictor.to_dict()))
    scratch.replace(target)  # atomic: a predictor file is whole or absent
    compared = ", ".join(f"{kind} {share:.0%}" for kind, share in predictor.compared.items())
    typer.echo(f"measured {n} networks of {loaded.name} on {predictor.runtime.get('device')} in "
               f"{predictor.runtime.get('runtime')}, {threads} thread(s), in {time.monotonic() - began:.0f} s")
    typer.echo(f"kept the {predictor.kind} predictor (cross-validated share within +-10%: {compared})")
    typer.echo(f"held out: {predictors.PredictionError(**predictor.error).text()}")
    typer.echo(f"wrote {target}  (use: eas search --predictor {target}"
               + (f" --device {runtime.device})" if runtime.device else ")"))
