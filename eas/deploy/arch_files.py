"""The text of an exported architecture: what arch.json holds and the standalone model.py.

Pure functions without torch, so that the explorer's download buttons do not import it; eas.deploy.export
writes the same text into an export folder and checks it against PyTorch.
"""

from __future__ import annotations

import importlib.util
import pprint
from pathlib import Path

from eas.arch.genome import Arch, arch_spec
from eas.provenance import versions

ARCH_FORMAT = "eas-arch/1"

MODEL_FOOTER = '''

# ---- the exported architecture -------------------------------------------------------------
GENOME = {genome}
ARCH = {spec}
INPUT_SHAPE = {input_shape!r}  # (channels, height, width)
NUM_CLASSES = {num_classes!r}


def build_model(num_classes: int = NUM_CLASSES, in_channels: int = INPUT_SHAPE[0]) -> Network:
    """The exported architecture, freshly initialised."""
    return Network(ARCH["stem"], ARCH["stages"], ARCH["head"], in_channels, num_classes)


def load_trained(path=None) -> Network:
    """The exported architecture with the weights `eas train` saved (model.safetensors beside this
    file by default), in eval mode; read with torch alone."""
    from pathlib import Path

    model = build_model()
    model.load_state_dict(read_safetensors(path or Path(__file__).with_name("model.safetensors")))
    return model.eval()


_DTYPES = {{"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
           "BOOL": torch.bool}}


def read_safetensors(path) -> dict:
    """A safetensors file as a state dict, without the safetensors package: 8 bytes giving the
    header's length, a JSON header (each tensor's dtype, shape and byte range), then the bytes."""
    import json
    from pathlib import Path

    data = Path(path).read_bytes()
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + length])
    body = data[8 + length:]
    tensors = {{}}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        start, end = entry["data_offsets"]
        dtype = _DTYPES[entry["dtype"]]
        if end > start:
            tensors[name] = torch.frombuffer(bytearray(body[start:end]), dtype=dtype).reshape(entry["shape"])
        else:
            tensors[name] = torch.empty(entry["shape"], dtype=dtype)
    return tensors


def preprocess(pixels) -> torch.Tensor:
    """Images as stored (N x C x H x W, uint8 for image data, already at INPUT_SHAPE's size) made into
    the model's input exactly as in training: arch.json's "preprocessing" (written by `eas train`)."""
    import json
    from pathlib import Path

    spec = json.loads(Path(__file__).with_name("arch.json").read_text()).get("preprocessing")
    if spec is None:
        raise ValueError("arch.json holds no preprocessing yet: it is recorded by `eas train`")
    scale, mean, std = checked_preprocessing(spec)
    x = pixels if isinstance(pixels, torch.Tensor) else torch.tensor(pixels)  # a copy: numpy arrays may be read-only
    if x.dim() != 4 or x.shape[1] != INPUT_SHAPE[0]:
        raise ValueError(f"preprocess: expected images N x {{INPUT_SHAPE[0]}} x H x W (got shape {{tuple(x.shape)}})")
    x = x.float()
    if not torch.isfinite(x).all():
        raise ValueError("preprocess: the images hold NaN or infinite values")
    return (x * scale - mean.view(1, -1, 1, 1)) / std.view(1, -1, 1, 1)


def checked_preprocessing(spec) -> tuple:
    """(pixel_scale, mean, std) of arch.json's "preprocessing", checked: one finite mean and one
    positive finite std per input channel, a positive finite pixel scale. An edited or damaged
    arch.json is refused with the reason instead of turning images into junk."""
    import math

    def numbers(key):
        values = spec.get(key) if isinstance(spec, dict) else None
        if not isinstance(values, list) or len(values) != INPUT_SHAPE[0] or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
            raise ValueError(f"arch.json preprocessing: {{key}} must be {{INPUT_SHAPE[0]}} finite number(s), one per "
                             f"input channel (got {{str(values)[:60]}})")
        return torch.tensor(values, dtype=torch.float32)

    mean, std = numbers("mean"), numbers("std")
    if not bool((std > 0).all()):
        raise ValueError(f"arch.json preprocessing: std must be positive (got {{std.tolist()}})")
    scale = spec.get("pixel_scale")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"arch.json preprocessing: pixel_scale must be a positive finite number (got {{scale!r}})")
    return float(scale), mean, std


if __name__ == "__main__":
    model = build_model().eval()
    print(GENOME)
    print(f"parameters: {{sum(p.numel() for p in model.parameters()):,}}")
    print("output shape:", tuple(model(torch.zeros(1, *INPUT_SHAPE)).shape))
'''


INLINED_IMPORT = "from eas.arch.channels import make_divisible  # inlined by eas export: keep this line as it is\n"


def _source(module: str) -> str:
    """A module's file as text, without importing it (blocks.py would import torch)."""
    return Path(importlib.util.find_spec(module).origin).read_text()


def _genome_lines(genome: str, width: int = 96) -> list[str]:
    """A genome cut after its part separators into lines of at most about `width` characters
    (the generated file stays within a linter's line length)."""
    lines, line = [], ""
    for part in genome.split("-"):
        piece = part if not line else "-" + part
        if line and len(line) + len(piece) > width:
            lines.append(line + "-")
            piece = part
            line = ""
        line += piece
    return [*lines, line]


def standalone_source(arch: Arch, input_shape: tuple[int, int, int], num_classes: int) -> str:
    header = ('"""Standalone PyTorch model exported by EAS: needs only torch.\n\n'
              "    from model import build_model, load_trained, preprocess\n"
              "    model = build_model()           # freshly initialised, to train elsewhere\n"
              "    model = load_trained()          # the weights `eas train` saved in model.safetensors\n"
              "    logits = model(preprocess(images))  # uint8 images as stored -> normalised as in training\n\n"
              "Genome:\n" + "".join(f"    {line}\n" for line in _genome_lines(arch.encode())) + '"""\n')
    body = _source("eas.arch.blocks")
    body = body[body.index("from __future__"):]  # drop blocks.py's own docstring
    channels = _source("eas.arch.channels")
    body = body.replace(INLINED_IMPORT, "\n" + channels[channels.index("def make_divisible"):])
    spec = pprint.pformat(arch_spec(arch), sort_dicts=False, width=110)  # Python literals, not JSON
    lines = _genome_lines(arch.encode())
    genome = repr(lines[0]) if len(lines) == 1 else "(" + "\n          ".join(repr(line) for line in lines) + ")"
    footer = MODEL_FOOTER.format(genome=genome, spec=spec, input_shape=tuple(input_shape),
                                 num_classes=num_classes)
    return header + body + footer


def arch_document(record, settings: dict, study_name: str, checks: dict | None = None) -> dict:
    """What arch.json holds; the explorer's download button uses it too."""
    stored = record.metrics
    arch = Arch.decode(record.genome)
    return {
        "format": ARCH_FORMAT,
        "genome": arch.encode(),
        "space": settings.get("space_name"),
        "task": {"data": settings.get("data"), "input_shape": list(settings["input_shape"]),
                 "num_classes": int(settings["num_classes"])},
        "spec": arch_spec(arch),
        "training": searched_training(record, settings),
        "metrics": {k: v for k, v in stored.items() if k != "versions"},
        "energy_source": stored.get("energy_source"),
        "provenance": {"study": study_name, "trial": record.number, "fidelity": stored.get("fidelity"),
                       "versions": stored.get("versions"), "exported_by": versions()},
        "checks": checks or {},
    }


def searched_training(record, settings: dict) -> dict:
    """The training hyperparameters the search chose for this trial (from the space's `train:`
    section); `eas train` uses them unless told otherwise. Empty when the space chose none."""
    section = (settings.get("space") or {}).get("train") or {}
    fidelity = record.metrics.get("fidelity") or {}
    return {key: fidelity[key] for key in section if key in fidelity}
