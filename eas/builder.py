"""Arch -> nn.Module, through one dispatch table from block kind to block constructor."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from eas.blocks import (
    ClassifierHead,
    ConvBNAct,
    DepthwiseSeparable,
    InvertedResidual,
    LinearAttentionBlock,
)
from eas.genome import Arch, Stage


def _linear_attention(cin: int, stage: Stage, stride: int) -> nn.Module:
    # Attention keeps the shape; a depthwise-separable conv changes width or resolution first.
    blocks: list[nn.Module] = []
    if stride != 1 or cin != stage.width:
        blocks.append(DepthwiseSeparable(cin, stage.width, 3, stride, stage.act))
    blocks.append(LinearAttentionBlock(stage.width, stage.heads, stage.ffn, stage.act))
    return nn.Sequential(*blocks) if len(blocks) > 1 else blocks[0]


BLOCKS: dict[str, Callable[[int, Stage, int], nn.Module]] = {
    "ds": lambda cin, s, stride: DepthwiseSeparable(cin, s.width, s.kernel, stride, s.act, s.se),
    "ir": lambda cin, s, stride: InvertedResidual(cin, s.width, s.kernel, stride, s.expansion,
                                                  s.act, s.se),
    "la": _linear_attention,
}


class Network(nn.Module):
    def __init__(self, arch: Arch, in_channels: int, num_classes: int):
        super().__init__()
        self.genome = arch.encode()
        stem = arch.stem
        self.stem = ConvBNAct(in_channels, stem.width, stem.kernel, stem.stride, act=stem.act)
        blocks, channels = [], stem.width
        for stage in arch.stages:
            for index in range(stage.repeats):
                blocks.append(BLOCKS[stage.kind](channels, stage, stage.stride if index == 0 else 1))
                channels = stage.width
        self.blocks = nn.Sequential(*blocks)
        head = arch.head
        self.head = ClassifierHead(channels, head.width, head.ffn, head.act, head.dropout,
                                   num_classes)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


def build(arch: Arch | str, input_shape: tuple[int, int, int] = (3, 224, 224),
          num_classes: int = 1000) -> Network:
    """Build the PyTorch model of `arch` for inputs of shape (C, H, W) and K classes."""
    if isinstance(arch, str):
        arch = Arch.decode(arch)
    return Network(arch, input_shape[0], num_classes)
