"""Well-known architectures written as genomes, available by name.

Counts for 3x224x224 input and 1000 classes (conv + linear multiply-adds):
mobilenet_v2 3,504,872 params / 300,774,272 MACs (Sandler et al. 2018: 3.4 M / 300 M);
mobilenet_v3_small ~2.54 M / ~56 M (Howard et al. 2019: 2.5 M / 56 M);
mobilenet_v1 4,231,976 params / ~569 M MACs (Howard et al. 2017: 4.2 M / 569 M).
"""

from __future__ import annotations

from eas.arch.genome import Arch
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


class UnknownReference(UserError, KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def reference(name: str) -> Arch:
    """The named reference architecture, as an Arch."""
    if name not in REFERENCES:
        raise UnknownReference(f"unknown reference {name!r} (known: {', '.join(REFERENCES)})")
    return Arch.decode(REFERENCES[name])


def arch_from_text(text: str) -> Arch:
    """A reference name or a genome string."""
    if text in REFERENCES:
        return reference(text)
    if "-" not in text:
        raise UnknownReference(f"{text!r} is neither a reference ({', '.join(REFERENCES)}) "
                               "nor a genome like 'stem_c16_k3_s1_relu-ir_r1_k3_s2_e4_c24_relu-...'")
    return Arch.decode(text)
