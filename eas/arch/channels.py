"""Channel rounding, shared by the counted costs and the built network. No imports: `eas export`
copies this function into the standalone model.py ahead of blocks.py."""


def make_divisible(value: float, divisor: int = 8) -> int:
    """Round channels to a multiple of `divisor`, never more than 10% down (MobileNet rule)."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded
