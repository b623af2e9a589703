"""How big a network, input or class count EAS agrees to build, checked before anything is
allocated. A genome, a shape or a class count may come from a shared study that anyone can
write to, or a typo (`--input 3x100000x100000`); without these limits one of them can make a
command try to allocate hundreds of GB. The limits are far above anything EAS searches.
"""

from __future__ import annotations

from eas.arch.counting import arch_cost
from eas.errors import UserError

MAX_CHANNELS_IN = 64
MAX_SIDE = 4096
MAX_CLASSES = 100_000
MAX_PARAMS = 200_000_000            # 800 MB of fp32 weights
MAX_ACTIVATION = 64 * 2**20         # values in one activation at batch 1 (256 MiB)


def check_shape(shape, what: str = "input shape") -> tuple[int, int, int]:
    """A (C, H, W) input shape with sane sizes, as a tuple of ints."""
    try:
        c, h, w = (int(v) for v in shape)
        if any(isinstance(v, bool) or int(v) != v for v in shape):
            raise ValueError
    except (TypeError, ValueError):
        raise UserError(f"{what} must be three integers C, H, W (got {shape!r})") from None
    if not (1 <= c <= MAX_CHANNELS_IN and 1 <= h <= MAX_SIDE and 1 <= w <= MAX_SIDE):
        raise UserError(f"{what} {c}x{h}x{w} is out of range (channels 1..{MAX_CHANNELS_IN}, "
                        f"height and width 1..{MAX_SIDE})")
    return c, h, w


def check_classes(num_classes, what: str = "number of classes") -> int:
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or not 2 <= num_classes <= MAX_CLASSES:
        raise UserError(f"{what} must be an integer 2..{MAX_CLASSES:,} (got {num_classes!r})")
    return num_classes


def check_buildable(arch, input_shape, num_classes) -> None:
    """Refuse, before building, an architecture whose weights or activations exceed the limits."""
    shape = check_shape(input_shape)
    check_classes(num_classes)
    cost = arch_cost(arch, shape, num_classes)
    if cost.params > MAX_PARAMS:
        raise UserError(f"architecture too large to build: {cost.params:,} parameters for {num_classes:,} "
                        f"classes (limit {MAX_PARAMS:,})")
    if cost.largest_tensor > MAX_ACTIVATION:
        raise UserError(f"architecture too large to build at input {'x'.join(map(str, shape))}: one activation "
                        f"holds {cost.largest_tensor:,} values (limit {MAX_ACTIVATION:,})")
