"""Is SRAM and flash counted from the genome what a microcontroller's runtime meets? For random
networks of each space, EAS's counts (eas.arch.microcontroller) against the real thing: the
network built by EAS, converted to TFLite by litert-torch, quantised fully to int8 (weights and
activations, static ranges from 8 calibration images) by ai-edge-quantizer, its tensor names
stripped (debug text a device does not need), then loaded by TensorFlow Lite Micro's interpreter,
whose recording allocator reports the arena it planned. One unit per space and input; hybrid
twice, as it is and with its GELU choices left out (TensorFlow Lite Micro has no GELU kernel).

SRAM is compared with the arena's head (the planned activations and kernels' scratch buffers; the
tail holds the interpreter's own bookkeeping, which depends on the runtime's build, not the
network); flash with the size of the stripped .tflite file. Goal: within 10% on every network.

Needs its own environment (`./scripts/setup-tflite.sh` makes .venv-tflite):

    .venv-tflite/bin/python benchmarks/microcontroller_truth.py --list
    setsid -w nice -n 19 .venv-tflite/bin/python benchmarks/microcontroller_truth.py --next
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import units
from trained_like import random_arch, trained_like

from eas.units import table as text_table

VERSION = 1
GOAL = 0.10  # largest relative difference allowed on any network
# Seed 7's networks fitted eas.arch.microcontroller's flash overheads; these are others.
CONFIG = {"networks": 20, "classes": 10, "calibration_images": 8, "seed": 8}
# TensorFlow Lite Micro has no GELU kernel, so hybrid's networks that choose it cannot load there:
# one unit measures how many; another checks the counts on hybrid's networks of the other activations.
TFLM_ACTIVATIONS = ["relu", "relu6", "hswish"]
UNITS = [units.Unit(name, {**CONFIG, "space": space, "input_shape": list(shape), "activations": activations})
         for name, space, shape, activations in (
             ("tiny-1x28x28", "tiny", (1, 28, 28), None), ("mobile-1x28x28", "mobile", (1, 28, 28), None),
             ("mobile-3x32x32", "mobile", (3, 32, 32), None), ("hybrid-1x28x28", "hybrid", (1, 28, 28), None),
             ("hybrid-tflm-activations-1x28x28", "hybrid", (1, 28, 28), TFLM_ACTIVATIONS))]


def convert(genome: str, shape: tuple, classes: int, calibration_images: int, folder: Path) -> bytes:
    """The int8 .tflite file of `genome`'s network, its tensor names stripped."""
    import flatbuffers
    import litert_torch
    import numpy as np
    import torch
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.interpreter import Interpreter
    from ai_edge_quantizer import quantizer, recipe

    rng = np.random.default_rng(0)
    model = trained_like(genome, shape, classes, rng)
    float_path = folder / "float.tflite"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        litert_torch.convert(model, (torch.randn(1, *shape),)).export(str(float_path))
    signature = Interpreter(model_path=str(float_path)).get_signature_list()
    key = next(iter(signature))
    name = signature[key]["inputs"][0]
    q = quantizer.Quantizer(str(float_path))
    q.load_quantization_recipe(recipe.static_wi8_ai8())
    calibration = {key: [{name: rng.random((1, *shape), dtype=np.float32)} for _ in range(calibration_images)]}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        quantized = bytes(q.quantize(q.calibrate(calibration)).quantized_model)
    document = schema.ModelT.InitFromObj(schema.Model.GetRootAs(quantized, 0))
    for subgraph in document.subgraphs:
        for tensor in subgraph.tensors:
            tensor.name = None
    for buffer in document.buffers:  # data kept after the flatbuffer (by offset) goes inside it:
        if buffer.offset and buffer.offset > 1:  # TensorFlow Lite Micro reads only inline buffers
            buffer.data = np.frombuffer(quantized[buffer.offset:buffer.offset + buffer.size], dtype=np.uint8)
            buffer.offset = buffer.size = 0
    builder = flatbuffers.Builder(1024)
    builder.Finish(document.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def operators(data: bytes) -> list[str]:
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAs(data, 0)
    codes = {value: name for name, value in vars(schema.BuiltinOperator).items() if not name.startswith("_")}
    subgraph = model.Subgraphs(0)
    found = []
    for i in range(subgraph.OperatorsLength()):
        code = model.OperatorCodes(subgraph.Operators(i).OpcodeIndex())
        found.append(codes[max(code.BuiltinCode(), code.DeprecatedBuiltinCode())])
    return found


def arena_head(data: bytes) -> int:
    """The arena head TensorFlow Lite Micro's recording allocator prints (to the C stderr)."""
    from tflite_micro.python.tflite_micro import runtime

    with tempfile.TemporaryFile() as captured:
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        failed = None
        try:
            runtime.Interpreter.from_bytes(data, arena_size=32 << 20).print_allocations()
        except RuntimeError as error:
            failed = error
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        text = captured.read().decode(errors="replace")
    if failed is not None or "Arena allocation head " not in text:
        said = " / ".join(line.strip() for line in text.splitlines() if line.strip() and "Recording" not in line)
        raise RuntimeError(f"TensorFlow Lite Micro refused the model: {said[-300:] or failed}")
    return int(text.split("Arena allocation head ")[1].split()[0])


def run(unit: units.Unit) -> tuple[dict, object]:
    from eas.arch.microcontroller import flash_bytes, int8_graph, sram_bytes
    from eas.arch.space import load_space

    s = unit.settings
    shape = tuple(s["input_shape"])
    space = load_space(s["space"]).for_task(shape)
    rng = random.Random(s["seed"])
    rows = []
    for index in range(s["networks"]):
        arch = random_arch(space, rng, s["activations"])
        started = time.perf_counter()
        counted = {"genome": arch.encode(), "sram_counted": sram_bytes(arch, shape, s["classes"]),
                   "flash_counted": flash_bytes(arch, shape, s["classes"])}
        try:
            with tempfile.TemporaryDirectory() as folder:
                data = convert(arch.encode(), shape, s["classes"], s["calibration_images"], Path(folder))
            ours = [op.kind for op in int8_graph(arch, shape, s["classes"]).operators]
            theirs = operators(data)
            row = {**counted, "file_bytes": len(data), "operators_match": theirs == ours,
                   "arena_head": arena_head(data)}
        except RuntimeError as error:  # a network the runtime cannot load: kept with its reason
            row = {**counted, "failed": str(error)[:400]}
        row["seconds"] = round(time.perf_counter() - started, 2)
        rows.append(row)
        print(f"{index + 1}/{s['networks']}: " + (f"failed: {row['failed']}" if "failed" in row else
              f"SRAM {row['sram_counted']:,} counted, {row['arena_head']:,} planned; flash "
              f"{row['flash_counted']:,} counted, {row['file_bytes']:,} in the file"), flush=True)
    return figures_of(rows), {"networks": rows}


def figures_of(rows: list[dict]) -> dict:
    """Differences over the networks the runtime loaded; how many it refused."""
    loaded = [r for r in rows if "failed" not in r]
    sram = [abs(r["sram_counted"] / r["arena_head"] - 1) for r in loaded]
    flash = [abs(r["flash_counted"] / r["file_bytes"] - 1) for r in loaded]
    return {"networks": len(rows), "loaded": len(loaded),
            "sram_largest_difference": max(sram, default=None),
            "sram_median_difference": statistics.median(sram) if sram else None,
            "flash_largest_difference": max(flash, default=None),
            "flash_median_difference": statistics.median(flash) if flash else None,
            "operators_match": sum(r["operators_match"] for r in loaded)}


def check(result: dict) -> str | None:
    rows = (result.get("raw") or {}).get("networks")
    sizes = ("arena_head", "file_bytes", "sram_counted", "flash_counted")
    if not isinstance(rows, list) or not rows or any(
            not isinstance(r, dict) or not all(units.finite(r.get(k)) and r.get(k) > 0
                                               for k in (sizes[2:] if "failed" in r else sizes)) for r in rows):
        return "its networks are not a list of positive sizes"
    if figures_of(rows) != result["figures"]:
        return "its figures are not those of its networks"
    return None


def benchmark() -> units.Benchmark:
    return units.Benchmark("microcontroller_truth", VERSION, UNITS, run, check,
                           description=__doc__.split("\n\n")[0])


def table(results: Path = units.RESULTS) -> str:
    """The docs' table (benchmarks.tables), from the result files."""
    done, problems = units.load_results(benchmark(), results)
    lines = [f"`microcontroller_truth.py`: {CONFIG['networks']} random networks per unit, counted by EAS against "
             "TensorFlow Lite Micro's planned arena (SRAM) and the stripped int8 .tflite file (flash). "
             f"**{len(done)} of {len(UNITS)} units done.**", ""]
    rows, refusals = [], {}
    for unit in UNITS:
        if unit.name not in done:
            rows.append([unit.name, "-", "-", "-", "-", "-"])
            continue
        f = done[unit.name]["figures"]
        for row in done[unit.name]["raw"]["networks"]:
            if "failed" in row:
                refusals.setdefault(row["failed"], []).append(unit.name)
        if not f["loaded"]:
            rows.append([unit.name, f"0 of {f['networks']}", "-", "-", "-", "-"])
            continue
        rows.append([unit.name, f"{f['loaded']} of {f['networks']}", f"{f['operators_match']} of {f['loaded']}",
                     f"{f['sram_median_difference']:.1%} / {f['sram_largest_difference']:.1%}",
                     f"{f['flash_median_difference']:.1%} / {f['flash_largest_difference']:.1%}",
                     "yes" if max(f["sram_largest_difference"], f["flash_largest_difference"]) <= GOAL else "no"])
    headers = ["space and input", "loaded", "same operators", "SRAM difference (median / largest)",
               "flash difference (median / largest)", f"within {GOAL:.0%}"]
    lines += units.code_block(text_table(rows, headers))
    for reason, where in refusals.items():
        lines += ["", f"Not loaded ({len(where)}, {', '.join(sorted(set(where)))}): {reason}"]
    if done:
        lines += ["", units.machines_line(list(done.values()))]
    lines += [f"Left out: {p}" for p in problems]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    units.main(benchmark(), units.parse_args(__doc__.split("\n\n")[0]))
