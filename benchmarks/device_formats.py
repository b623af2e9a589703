"""Which of the space's networks do the device formats take, and do they answer as PyTorch does?
For random networks of each space (trained-like BatchNorms), each format of `eas export --format`
is written by EAS's own writer (eas.deploy.formats) and run in its own runtime: the ExecuTorch
program (XNNPACK delegate) in float and int8 (PT2E static quantisation calibrated on 64 images),
ONNX Runtime's mobile format in float. Recorded per network: whether it converted (the reason
when not), the largest difference of the logits from PyTorch's on 64 other images, the int8
program's top-1 agreement with PyTorch, the files' sizes beside the int8 flash EAS counts, and
the seconds each conversion took. Needs the executorch extra (`pip install 'eas[executorch]'`).
    python benchmarks/device_formats.py --list
    setsid -w nice -n 19 python benchmarks/device_formats.py --next
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from pathlib import Path

import units
from trained_like import random_arch, trained_like

from eas.units import table as text_table

VERSION = 1
CONFIG = {"networks": 8, "classes": 10, "images": 64, "seed": 9}
UNITS = [units.Unit(name, {**CONFIG, "space": space, "input_shape": list(shape)})
         for name, space, shape in (("tiny-1x28x28", "tiny", (1, 28, 28)), ("mobile-1x28x28", "mobile", (1, 28, 28)),
                                    ("mobile-3x32x32", "mobile", (3, 32, 32)),
                                    ("hybrid-1x28x28", "hybrid", (1, 28, 28)))]
ROUTES = ("pte", "pte-int8", "ort")


def measure_route(route: str, model, calibration, probe, folder: Path) -> dict:
    """One format written, run on `probe` and compared with PyTorch; the reason when it fails."""
    import numpy as np
    import torch

    from eas.deploy.formats import FORMATS

    deploy_format = FORMATS[route.split("-")[0]]
    path = folder / (deploy_format.int8_file if route.endswith("int8") else deploy_format.file)
    started = time.perf_counter()
    try:
        if route.endswith("int8"):
            deploy_format.write_int8(model, calibration, path)
        else:
            deploy_format.write(model, probe[:2], path)
        seconds = time.perf_counter() - started
        got = deploy_format.run(path, probe)
    except Exception as error:  # a converter or runtime that cannot take this network: kept with its reason
        return {"failed": f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"}
    with torch.no_grad():
        expected = model(probe).numpy()
    return {"max_abs_diff": float(np.abs(got - expected).max()),
            "top1_agreement": float((got.argmax(1) == expected.argmax(1)).mean()),
            "file_bytes": path.stat().st_size, "seconds": round(seconds, 2)}


def run(unit: units.Unit) -> tuple[dict, object]:
    import numpy as np
    import torch

    from eas.arch.microcontroller import flash_bytes
    from eas.arch.space import load_space

    s = unit.settings
    shape = tuple(s["input_shape"])
    space = load_space(s["space"]).for_task(shape)
    rng = random.Random(s["seed"])
    rows = []
    for index in range(s["networks"]):
        arch = random_arch(space, rng)
        images = np.random.default_rng(index)
        model = trained_like(arch.encode(), shape, s["classes"], images)
        calibration = torch.from_numpy(images.random((s["images"], *shape), dtype=np.float32))
        probe = torch.from_numpy(images.random((s["images"], *shape), dtype=np.float32))
        row = {"genome": arch.encode(), "flash_counted": flash_bytes(arch, shape, s["classes"])}
        with tempfile.TemporaryDirectory() as folder:
            for route in ROUTES:
                row[route] = measure_route(route, model, calibration, probe, Path(folder))
        rows.append(row)
        print(f"{index + 1}/{s['networks']}: " + "; ".join(
            f"{route} " + (f"failed: {row[route]['failed']}" if "failed" in row[route] else
                           f"diff {row[route]['max_abs_diff']:.2g}, top-1 {row[route]['top1_agreement']:.0%}")
            for route in ROUTES), flush=True)
    return figures_of(rows), {"networks": rows}


def figures_of(rows: list[dict]) -> dict:
    figures: dict = {"networks": len(rows)}
    for route in ROUTES:
        done = [r[route] for r in rows if "failed" not in r[route]]
        figures[route] = {
            "converted": len(done),
            "largest_difference": max((d["max_abs_diff"] for d in done), default=None),
            "median_top1_agreement": statistics.median([d["top1_agreement"] for d in done]) if done else None,
            "lowest_top1_agreement": min((d["top1_agreement"] for d in done), default=None),
            "median_seconds": statistics.median([d["seconds"] for d in done]) if done else None,
        }
    sized = [r for r in rows if "failed" not in r["pte-int8"]]
    figures["int8_file_over_counted_flash"] = (statistics.median([r["pte-int8"]["file_bytes"] / r["flash_counted"]
                                                                  for r in sized]) if sized else None)
    return figures


def check(result: dict) -> str | None:
    rows = (result.get("raw") or {}).get("networks")
    if not isinstance(rows, list) or not rows or any(
            not isinstance(r, dict) or not units.finite(r.get("flash_counted"))
            or any(not isinstance(r.get(route), dict) for route in ROUTES) for r in rows):
        return "its networks are not a list of measured routes"
    if any(not all(units.finite(r[route].get(k)) for k in ("max_abs_diff", "top1_agreement", "file_bytes"))
           for r in rows for route in ROUTES if "failed" not in r[route]):
        return "a converted network lacks its figures"
    if figures_of(rows) != result["figures"]:
        return "its figures are not those of its networks"
    return None


def benchmark() -> units.Benchmark:
    return units.Benchmark("device_formats", VERSION, UNITS, run, check, description=__doc__.split("\n\n")[0])


def table(results: Path = units.RESULTS) -> str:
    """The docs' table (benchmarks.tables), from the result files."""
    done, problems = units.load_results(benchmark(), results)
    lines = [f"`device_formats.py`: {CONFIG['networks']} random networks per unit, each format written by "
             f"`eas export --format`'s writer and run in its own runtime on {CONFIG['images']} random images "
             "(random weights: a trained network's int8 agreement is the one `eas train` reports). "
             f"**{len(done)} of {len(UNITS)} units done.**", ""]
    rows, failures = [], {}
    for unit in UNITS:
        if unit.name not in done:
            rows.append([unit.name] + ["-"] * len(ROUTES))
            continue
        f = done[unit.name]["figures"]
        for row in done[unit.name]["raw"]["networks"]:
            for route in ROUTES:
                if "failed" in row[route]:
                    failures.setdefault(f"{route}: {row[route]['failed']}", []).append(unit.name)
        cells = []
        for route in ROUTES:
            r = f[route]
            if not r["converted"]:
                cells.append(f"0 of {f['networks']}")
                continue
            quality = (f"top-1 {r['median_top1_agreement']:.0%} (lowest {r['lowest_top1_agreement']:.0%})"
                       if route.endswith("int8") else f"max diff {r['largest_difference']:.1g}")
            cells.append(f"{r['converted']} of {f['networks']}, {quality}, {r['median_seconds']:.1f} s")
        rows.append([unit.name, *cells])
    headers = ["space and input", "ExecuTorch .pte (float)", "ExecuTorch .pte (int8)", "ONNX Runtime .ort"]
    lines += units.code_block(text_table(rows, headers))
    ratios = [done[u.name]["figures"]["int8_file_over_counted_flash"] for u in UNITS if u.name in done
              and done[u.name]["figures"]["int8_file_over_counted_flash"] is not None]
    if ratios:
        lines += ["", f"The int8 .pte file is {min(ratios):.2f}-{max(ratios):.2f}x the int8 flash EAS counts for "
                      "TensorFlow Lite Micro (median per unit)."]
    for reason, where in failures.items():
        lines += ["", f"Not converted ({len(where)}, {', '.join(sorted(set(where)))}): {reason}"]
    if done:
        lines += ["", units.machines_line(list(done.values()))]
    lines += [f"Left out: {p}" for p in problems]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    units.main(benchmark(), units.parse_args(__doc__.split("\n\n")[0]))
