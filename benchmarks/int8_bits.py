"""What do int8 weights kept to 7 bits cost, and what do 8 bits lose, on CPUs with and without
VNNI? EAS's int8 ONNX Runtime models (`eas compress --int8`, the int8 .ort of `eas train`) keep
their weights to 7 bits because ONNX Runtime's uint8 x int8 kernels on x86 CPUs without VNNI
(AVX2's VPMADDUBSW) add pairs of products in 16 bits, which saturate with 8-bit weights.

For random `mobile` networks of at most 20 M MACs, trained 1 epoch on Fashion-MNIST (EAS's
default optimiser and seed), the int8 .ort is written both ways (static QDQ, per-channel weights,
uint8 activations calibrated on 512 training images, as EAS writes it) and run with the fp32 .ort
on the 10,000 test images in ONNX Runtime at 1 thread: test accuracy and top-1 agreement with the
fp32 file. (No latency: a unit runs niced beside other work, where one image's latency measures the
load; `compression.py` times int8 against fp32.) Two units, each run only on its kind of CPU:

    python benchmarks/int8_bits.py --list
    setsid -w nice -n 19 python benchmarks/int8_bits.py --unit vnni      # or --unit no-vnni
"""

from __future__ import annotations

import random
import statistics
import tempfile
from pathlib import Path

import units
from trained_like import random_arch

from eas.units import table as text_table

VERSION = 1
CONFIG = {"space": "mobile", "data": "fashion-mnist", "networks": 5, "max_macs": 20_000_000, "epochs": 1.0,
          "seed": 0, "calibration_images": 512, "threads": 1}
UNITS = [units.Unit("vnni", {**CONFIG, "vnni": True}), units.Unit("no-vnni", {**CONFIG, "vnni": False})]
VARIANTS = ("fp32", "int8-8bit", "int8-7bit")
VNNI_FLAGS = ("avx512_vnni", "avx_vnni")


def cpu_has_vnni() -> bool:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return any(flag in flags for flag in VNNI_FLAGS)


def refuse(unit: units.Unit) -> str | None:
    """Why this CPU cannot run `unit`: each unit measures one kind of CPU."""
    wanted = unit.settings["vnni"]
    if cpu_has_vnni() == wanted:
        return None
    other = next(u.name for u in UNITS if u.settings["vnni"] != wanted)
    return (f"unit {unit.name} runs on a CPU {'with' if wanted else 'without'} VNNI; this one "
            f"({units.cpu_model()}) {'lacks' if wanted else 'has'} it: run --unit {other}")


def networks(task, settings: dict) -> list:
    """The first `networks` random architectures of the space under the MACs limit (fixed by the seed)."""
    from eas.arch.space import load_space
    from eas.nas.candidate import counted_metrics

    space, rng, found = load_space(settings["space"]).for_task(task.input_shape), random.Random(settings["seed"]), []
    while len(found) < settings["networks"]:
        arch = random_arch(space, rng)
        if counted_metrics(arch, task)["macs"] <= settings["max_macs"]:
            found.append(arch)
    return found


def measure(path: Path, x, labels, reference) -> tuple[dict, object]:
    """The file's test accuracy (and agreement with `reference`, the fp32 file's answers), its answers."""
    from eas.deploy.formats import FORMATS

    predicted = FORMATS["ort"].run(path, x, threads=CONFIG["threads"]).argmax(1)
    figures = {"test_accuracy": float((predicted == labels).mean()), "bytes": path.stat().st_size}
    if reference is not None:
        figures["top1_agreement"] = float((predicted == reference).mean())
    return figures, predicted


def run(unit: units.Unit) -> tuple[dict, object]:
    import torch

    from eas.data.datasets import load_dataset
    from eas.deploy.formats import onnx_to_ort
    from eas.deploy.quantize import calibration_images, quantize_onnx
    from eas.measure.runtime import to_onnx
    from eas.nas.candidate import Candidate
    from eas.training.proxy import Fidelity

    s = unit.settings
    task = load_dataset(s["data"], seed=s["seed"])
    x, labels = task.test_x[:], task.test_y.numpy()
    calibration = calibration_images(task.train_x, s["calibration_images"])
    fidelity = Fidelity(epochs=s["epochs"])
    rows = []
    for index, arch in enumerate(networks(task, s)):
        candidate = Candidate(arch, task, fidelity, "cpu", s["seed"], meter="estimated")
        trained = candidate.train_segment(fidelity.total_steps(len(task.train_y)))
        model = candidate.model.eval().to(memory_format=torch.contiguous_format)
        row = {"genome": arch.encode(), "macs": candidate.metrics["macs"], "train_seconds": round(trained.seconds, 1)}
        with tempfile.TemporaryDirectory() as work:
            folder = Path(work)
            to_onnx(model, x[:2], str(folder / "source.onnx"))  # exported once: the fp32 .ort and both int8 ones
            onnx_to_ort(folder / "source.onnx", folder / "model.ort")
            row["fp32"], reference = measure(folder / "model.ort", x, labels, None)
            for bits in (8, 7):
                quantized = folder / f"int8-{bits}.onnx"
                quantize_onnx(folder / "source.onnx", quantized, calibration, reduce_range=bits == 7)
                onnx_to_ort(quantized, folder / f"int8-{bits}.ort")
                row[f"int8-{bits}bit"], _ = measure(folder / f"int8-{bits}.ort", x, labels, reference)
        rows.append(row)
        print(f"{index + 1}/{s['networks']}: {row['macs'] / 1e6:.1f} M MACs, fp32 {row['fp32']['test_accuracy']:.2%}; "
              + "; ".join(f"{v} {row[v]['test_accuracy']:.2%} (agrees {row[v]['top1_agreement']:.1%})"
                          for v in VARIANTS[1:]), flush=True)
    return figures_of(rows), {"networks": rows}


def figures_of(rows: list[dict]) -> dict:
    figures: dict = {"networks": len(rows)}
    for variant in VARIANTS[1:]:
        figures[variant] = {
            "median_accuracy_change_points": statistics.median(
                100 * (r[variant]["test_accuracy"] - r["fp32"]["test_accuracy"]) for r in rows),
            "lowest_top1_agreement": min(r[variant]["top1_agreement"] for r in rows)}
    return figures


def check(result: dict) -> str | None:
    rows = (result.get("raw") or {}).get("networks")
    if not isinstance(rows, list) or not rows or any(not isinstance(r, dict) for r in rows):
        return "its networks are not a list"
    for row in rows:
        for variant in VARIANTS:
            figures = row.get(variant)
            shares = ("test_accuracy",) + (("top1_agreement",) if variant != "fp32" else ())
            if not isinstance(figures, dict) or not all(units.fraction(figures.get(k)) for k in shares):
                return f"a network's {variant} figures are missing or impossible"
    if figures_of(rows) != result["figures"]:
        return "its figures are not those of its networks"
    return None


def benchmark() -> units.Benchmark:
    return units.Benchmark("int8_bits", VERSION, UNITS, run, check, refuse, description=__doc__.split("\n\n")[0])


def table(results: Path = units.RESULTS) -> str:
    """The docs' table (benchmarks.tables), from the result files."""
    done, problems = units.load_results(benchmark(), results)
    lines = [f"`int8_bits.py`: {CONFIG['networks']} random `{CONFIG['space']}` networks of at most "
             f"{CONFIG['max_macs'] / 1e6:.0f} M MACs, trained {CONFIG['epochs']:g} epoch on Fashion-MNIST; int8 .ort "
             f"with 8-bit and 7-bit weights against the fp32 .ort, ONNX Runtime at {CONFIG['threads']} thread, "
             f"10,000 test images. **{len(done)} of {len(UNITS)} units done.**", ""]
    rows = []
    for unit in UNITS:
        if unit.name not in done:
            rows.append([unit.name, "-", "-", "-", "-"])
            continue
        for row in done[unit.name]["raw"]["networks"]:
            cells = [unit.name, f"{row['macs'] / 1e6:.1f} M", f"{row['fp32']['test_accuracy']:.2%}"]
            for variant in VARIANTS[1:]:
                v = row[variant]
                change = 100 * (v["test_accuracy"] - row["fp32"]["test_accuracy"])
                cells.append(f"{change:+.2f} points, agrees {v['top1_agreement']:.1%}")
            rows.append(cells)
    headers = ["CPU", "MACs", "fp32 accuracy", "int8, 8-bit weights vs fp32", "int8, 7-bit weights vs fp32"]
    lines += units.code_block(text_table(rows, headers))
    for unit in UNITS:
        if unit.name in done:
            f = done[unit.name]["figures"]
            lines += ["", f"{unit.name}, median change from fp32 over {f['networks']} networks: 8-bit weights "
                          f"{f['int8-8bit']['median_accuracy_change_points']:+.2f} points (lowest agreement "
                          f"{f['int8-8bit']['lowest_top1_agreement']:.1%}), 7-bit "
                          f"{f['int8-7bit']['median_accuracy_change_points']:+.2f} points (lowest agreement "
                          f"{f['int8-7bit']['lowest_top1_agreement']:.1%})."]
    if done:
        lines += ["", units.machines_line(list(done.values()))]
    lines += [f"Left out: {p}" for p in problems]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    units.main(benchmark(), units.parse_args(__doc__.split("\n\n")[0]))
