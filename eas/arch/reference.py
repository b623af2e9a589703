"""Well-known architectures written as genomes, available by name, and their width multipliers.

Counts for 3x224x224 input and 1000 classes (conv + linear multiply-adds):
mobilenet_v2 3,504,872 params / 300,774,272 MACs (Sandler et al. 2018: 3.4 M / 300 M);
mobilenet_v3_small ~2.54 M / ~56 M (Howard et al. 2019: 2.5 M / 56 M);
mobilenet_v1 4,231,976 params / ~569 M MACs (Howard et al. 2017: 4.2 M / 569 M).

`name@alpha` is the network at width multiplier alpha, as the papers and TF-Slim build it: every
width times alpha, rounded to a multiple of 8 (never more than 10% down); expanded widths
rounded from the scaled input; MobileNetV2 keeps its 1280-wide last layer below 1.0 and
MobileNetV3 its 1024-unit classifier layer (its last conv is 6x the last block). Counted here,
mobilenet_v2@0.35/0.5/0.75 have the MACs of TF-Slim's table (59 M, 97 M, 209 M) and 1% more
parameters (1.68 M, 1.97 M, 2.64 M against 1.66 M, 1.95 M, 2.61 M: TF-Slim's BatchNorm has no
scale, ours has), mobilenet_v3_small@0.75 43.4 M MACs / 2.04 M params (published: 44 M / 2.0 M).
"""

from __future__ import annotations

import re
from dataclasses import replace

from eas.arch.channels import make_divisible
from eas.arch.genome import Arch, GenomeError
from eas.arguments import text
from eas.errors import UserError

REFERENCES: dict[str, str] = {
    "mobilenet_v2": "-".join([
        "stem_c32_k3_s2_relu6",
        "ir_r1_k3_s1_e1_c16_relu6",
        "ir_r2_k3_s2_e6_c24_relu6",
        "ir_r3_k3_s2_e6_c32_relu6",
        "ir_r4_k3_s2_e6_c64_relu6",
        "ir_r3_k3_s1_e6_c96_relu6",
        "ir_r3_k3_s2_e6_c160_relu6",
        "ir_r1_k3_s1_e6_c320_relu6",
        "head_c1280_f0_relu6_d0.2",
    ]),
    # Expansions are hidden widths over input widths (72/16 = 4.5, 88/24 = 3.67, ...).
    "mobilenet_v3_small": "-".join([
        "stem_c16_k3_s2_hswish",
        "ir_r1_k3_s2_e1_c16_se_relu",
        "ir_r1_k3_s2_e4.5_c24_relu",
        "ir_r1_k3_s1_e3.67_c24_relu",
        "ir_r1_k5_s2_e4_c40_se_hswish",
        "ir_r2_k5_s1_e6_c40_se_hswish",
        "ir_r2_k5_s1_e3_c48_se_hswish",
        "ir_r1_k5_s2_e6_c96_se_hswish",
        "ir_r2_k5_s1_e6_c96_se_hswish",
        "head_c576_f1024_hswish_d0.2",
    ]),
    "mobilenet_v1": "-".join([
        "stem_c32_k3_s2_relu",
        "ds_r1_k3_s1_c64_relu",
        "ds_r1_k3_s2_c128_relu",
        "ds_r1_k3_s1_c128_relu",
        "ds_r1_k3_s2_c256_relu",
        "ds_r1_k3_s1_c256_relu",
        "ds_r1_k3_s2_c512_relu",
        "ds_r5_k3_s1_c512_relu",
        "ds_r1_k3_s2_c1024_relu",
        "ds_r1_k3_s1_c1024_relu",
        "head_c0_f0_relu_d0",
    ]),
}


# How each family's last layers follow the multiplier (see the module docstring).
HEADS = {
    "mobilenet_v2": lambda head, last, alpha: replace(head, width=make_divisible(head.width * max(alpha, 1.0))),
    "mobilenet_v3_small": lambda head, last, alpha: replace(head, width=make_divisible(last * 6),
                                                            ffn=make_divisible(head.ffn * max(alpha, 1.0))),
    "mobilenet_v1": lambda head, last, alpha: head,
}


class UnknownReference(UserError, KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def scaled(arch: Arch, alpha: float, family: str) -> Arch:
    """`arch` (a reference network) at width multiplier `alpha`."""
    stem = replace(arch.stem, width=make_divisible(arch.stem.width * alpha))
    channels, stages = stem.width, []
    for stage in arch.stages:
        expansion = 1.0
        if stage.expansion != 1.0:  # the expanded width, rounded from the scaled input width
            hidden = make_divisible(channels * stage.expansion)
            expansion = round(hidden / channels, 4)
            assert round(channels * expansion) == hidden  # four decimals name every such width
        stages.append(replace(stage, width=make_divisible(stage.width * alpha), expansion=expansion))
        channels = stages[-1].width
    return replace(arch, stem=stem, stages=tuple(stages), head=HEADS[family](arch.head, channels, alpha))


def reference(name: str) -> Arch:
    """The named reference architecture, as an Arch; `family@alpha` at a width multiplier."""
    text("eas.reference", "name", name)
    family, _, multiplier = name.partition("@")
    if family not in REFERENCES:
        raise UnknownReference(f"unknown reference {name!r} (known: {', '.join(REFERENCES)}, each with "
                               "@multiplier, e.g. mobilenet_v2@0.35)")
    arch = Arch.decode(REFERENCES[family])
    if "@" not in name:
        return arch
    try:  # ASCII digits only: float() also reads fullwidth ones, and the name would then label a network twice
        alpha = float(multiplier) if re.fullmatch(r"[0-9]*\.?[0-9]+", multiplier) else float("nan")
    except ValueError:
        alpha = float("nan")
    if not 0.05 <= alpha <= 4.0:  # NaN fails too
        raise UnknownReference(f"{name!r}: the width multiplier after @ must be a number in 0.05..4 "
                               f"(got {multiplier[:20]!r})")
    try:
        return scaled(arch, alpha, family)
    except GenomeError as error:
        raise UnknownReference(f"{name!r}: {error}") from None


ADAPTED = ":adapted"  # a baseline name's suffix: the network adapted to a small input


def baseline_arch(name: str, input_shape) -> Arch:
    """The network a baseline name stands for at this input: `family@alpha` as published,
    `family@alpha:adapted` with the small-input rule applied (`Arch.adapted_to`)."""
    published = reference(name.removesuffix(ADAPTED))
    return published.adapted_to(min(input_shape[1:])) if name.endswith(ADAPTED) else published


def arch_from_text(text: str) -> Arch:
    """A reference name (with an optional @multiplier) or a genome string."""
    if text.partition("@")[0] in REFERENCES:
        return reference(text)
    if "-" not in text:
        raise UnknownReference(f"{text!r} is neither a reference ({', '.join(REFERENCES)}) "
                               "nor a genome like 'stem_c16_k3_s1_relu-ir_r1_k3_s2_e4_c24_relu-...'")
    return Arch.decode(text)
