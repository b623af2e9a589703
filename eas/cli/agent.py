"""`eas agent serve | info | calibrate`: the deployment target in the loop, through its agent.

Words: the *target* is the machine a model is deployed on; the *agent* is the program that
measures there (eas-agent); the *device* is where PyTorch runs (`--device cpu|cuda`). The older
spellings (`eas device ...`, `--device URL`, $EAS_DEVICE_TOKEN) are still understood.

`serve` runs the measuring agent (eas_agent.agent; the target needs only `pip install ./eas_agent`,
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

agent = lazy_import("eas_agent.agent")
client = lazy_import("eas_agent.client")
space_files = lazy_import("eas.arch.space")
datasets = lazy_import("eas.data.datasets")
runtimes = lazy_import("eas.measure.runtime")
calibration = lazy_import("eas.measure.calibration")
predictors = lazy_import("eas.measure.predictor")

UrlOption = Annotated[str, typer.Option("--target", "--device", help="The URL of the agent on the target, e.g. "
                                        "http://pi.local:8765 (token from $EAS_AGENT_TOKEN; --device: the older "
                                        "name).")]


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
    try:  # the same checks as the standalone `eas-agent serve`
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


def info_command(target: UrlOption, json_output: Annotated[bool, typer.Option("--json")] = False) -> None:
    """What the agent at --target is: runtime, provider, CPU, limits, queue."""
    try:
        answer = client.info(target)
    except (ValueError, client.AgentError) as error:
        raise UserError(str(error)) from None
    if json_output:
        return emit_json(answer)
    for key in ("agent", "runtime", "providers", "device", "cores", "queued"):
        typer.echo(f"{key:10}{answer.get(key)}")


def _default_out(space: str, target: str | None, threads: int) -> Path:
    where = re.sub(r"[^A-Za-z0-9.-]+", "-", target.split("://", 1)[1]) if target else "local"
    return Path("studies") / "predictors" / f"{Path(space).stem}-{where}-{threads}t.json"


def calibrate_command(
    target: Annotated[str | None, typer.Option("--target", "--device", help="The URL of the agent on the target; "
                                               "omitted: this machine (--device: the older name).")] = None,
    space: Annotated[str, typer.Option("--space", help="Space name or YAML file.")] = "mobile",
    data: DataOption = "fashion-mnist",
    n: Annotated[int, typer.Option("--n", help="Networks to measure (a fifth is held out).", min=20,
                                   max=5000)] = 200,
    threads: Annotated[int, typer.Option("--threads", help="ONNX Runtime threads, as the search will use.",
                                         min=1, max=256)] = 1,
    out: Annotated[Path | None, typer.Option("--out", help="Where to write the predictor (JSON).")] = None,
    seed: SeedOption = 0,
) -> None:
    """Measure --n random networks of a space and fit the latency predictor for that target."""
    runtime = runtimes.Runtime.parse("onnxruntime", threads, 32, target)
    loaded = space_files.load_space(space)
    task = datasets.load_dataset(data, seed=seed)
    loaded = loaded.for_task(task.input_shape)
    written = out or _default_out(space, runtime.target, threads)
    if written.exists() and not written.is_file():
        raise UserError(f"--out {written} is not a file")
    if runtime.target:
        try:
            client.info(runtime.target)
        except client.AgentError as error:
            raise UserError(str(error)) from None
    began = time.monotonic()

    def progress(done: int, total: int, latency_ms: float) -> None:
        print(f"\rmeasured {done}/{total} (last {latency_ms:.3f} ms, {time.monotonic() - began:.0f} s)",
              end="", file=sys.stderr, flush=True)

    try:
        predictor = calibration.calibrate(loaded, task.input_shape, task.num_classes, runtime, n, seed, progress)
    except client.AgentError as error:
        raise UserError(str(error)) from None
    print(file=sys.stderr)
    written.parent.mkdir(parents=True, exist_ok=True)
    scratch = written.with_name(f".{written.name}.{os.getpid()}")
    scratch.write_text(json.dumps(predictor.to_dict()))
    scratch.replace(written)  # atomic: a predictor file is whole or absent
    compared = ", ".join(f"{kind} {share:.0%}" for kind, share in predictor.compared.items())
    typer.echo(f"measured {n} networks of {loaded.name} on {predictor.runtime.get('device')} in "
               f"{predictor.runtime.get('runtime')}, {threads} thread(s), in {time.monotonic() - began:.0f} s")
    typer.echo(f"kept the {predictor.kind} predictor (cross-validated share within +-10%: {compared})")
    typer.echo(f"held out: {predictors.PredictionError(**predictor.error).text()}")
    typer.echo(f"wrote {written}  (use: eas search --predictor {written}"
               + (f" --target {runtime.target})" if runtime.target else ")"))
