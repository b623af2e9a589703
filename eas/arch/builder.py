"""Arch -> nn.Module. The network itself lives in eas.arch.blocks (torch only, exportable)."""

from __future__ import annotations

from eas.arch.blocks import Network
from eas.arch.bounds import check_buildable
from eas.arch.genome import Arch, arch_spec
from eas.arguments import shown
from eas.errors import ArgumentTypeError


def build(arch: Arch | str, input_shape: tuple[int, int, int] = (3, 224, 224),
          num_classes: int = 1000) -> Network:
    """Build the PyTorch model of `arch` for inputs of shape (C, H, W) and K classes; refused
    before anything is allocated when it would exceed eas.arch.bounds."""
    if isinstance(arch, str):
        arch = Arch.decode(arch)
    if not isinstance(arch, Arch):
        raise ArgumentTypeError(f"eas.build: arch must be an Arch or a genome string (got {shown(arch)})")
    check_buildable(arch, input_shape, num_classes)
    spec = arch_spec(arch)
    model = Network(spec["stem"], spec["stages"], spec["head"], input_shape[0], num_classes)
    model.genome = arch.encode()
    return model
