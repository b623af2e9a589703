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
GENOME = {genome!r}
ARCH = {spec}
INPUT_SHAPE = {input_shape!r}  # (channels, height, width)
NUM_CLASSES = {num_classes!r}


def build_model(num_classes: int = NUM_CLASSES, in_channels: int = INPUT_SHAPE[0]) -> Network:
    """The exported architecture, freshly initialised."""
    return Network(ARCH["stem"], ARCH["stages"], ARCH["head"], in_channels, num_classes)


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


def standalone_source(arch: Arch, input_shape: tuple[int, int, int], num_classes: int) -> str:
    header = (f'"""Standalone PyTorch model exported by EAS: needs only torch.\n\n'
              f"    from model import build_model\n    model = build_model()\n\n"
              f'Genome: {arch.encode()}\n"""\n')
    body = _source("eas.arch.blocks")
    body = body[body.index("from __future__"):]  # drop blocks.py's own docstring
    channels = _source("eas.arch.channels")
    body = body.replace(INLINED_IMPORT, channels[channels.index("def make_divisible"):])
    spec = pprint.pformat(arch_spec(arch), sort_dicts=False, width=110)  # Python literals, not JSON
    footer = MODEL_FOOTER.format(genome=arch.encode(), spec=spec, input_shape=tuple(input_shape),
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
