"""PyTorch building blocks and the network they make. Convolutions carry no bias: a BatchNorm
follows each one.

This file imports only torch and make_divisible: `eas export` copies it into a standalone model.py
(with make_divisible inlined), so an exported architecture is built by exactly this code, with or without EAS installed.
A network is described by plain dicts (the genome's fields), not by EAS's classes.
"""

from __future__ import annotations

import torch
from torch import nn

from eas.arch.channels import make_divisible  # inlined by eas export: keep this line as it is

ACTIVATION_MODULES = {
    "relu": nn.ReLU,
    "relu6": nn.ReLU6,
    "hswish": nn.Hardswish,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
}


class ConvBNAct(nn.Sequential):
    def __init__(self, cin: int, cout: int, kernel: int = 1, stride: int = 1,
                 groups: int = 1, act: str | None = "relu6"):
        layers: list[nn.Module] = [
            nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
        ]
        if act is not None:
            layers.append(ACTIVATION_MODULES[act]())
        super().__init__(*layers)


class SqueezeExcite(nn.Module):
    """Channel gating as in MobileNetV3: squeeze to a quarter (multiple of 8), hard-sigmoid gate."""

    def __init__(self, channels: int):
        super().__init__()
        squeezed = make_divisible(channels // 4, 8)
        self.reduce = nn.Conv2d(channels, squeezed, 1)
        self.act = nn.ReLU()
        self.expand = nn.Conv2d(squeezed, channels, 1)
        self.gate = nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = x.mean((2, 3), keepdim=True)
        return x * self.gate(self.expand(self.act(self.reduce(scale))))


class DepthwiseSeparable(nn.Module):
    """MobileNetV1 block: depthwise k x k conv, optional SE, pointwise conv; both activated."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, act: str, se: bool = False):
        super().__init__()
        self.depthwise = ConvBNAct(cin, cin, kernel, stride, groups=cin, act=act)
        self.se = SqueezeExcite(cin) if se else nn.Identity()
        self.pointwise = ConvBNAct(cin, cout, 1, act=act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pointwise(self.se(self.depthwise(x)))


class InvertedResidual(nn.Module):
    """MBConv: 1x1 expand (skipped at ratio 1), depthwise k x k, optional SE, linear 1x1 project.

    The residual is used when shape is preserved, as in MobileNetV2/V3.
    """

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expansion: float,
                 act: str, se: bool = False):
        super().__init__()
        hidden = int(round(cin * expansion))
        self.use_residual = stride == 1 and cin == cout
        self.expand = ConvBNAct(cin, hidden, 1, act=act) if hidden != cin else nn.Identity()
        self.depthwise = ConvBNAct(hidden, hidden, kernel, stride, groups=hidden, act=act)
        self.se = SqueezeExcite(hidden) if se else nn.Identity()
        self.project = ConvBNAct(hidden, cout, 1, act=None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.project(self.se(self.depthwise(self.expand(x))))
        return x + out if self.use_residual else out


class LinearAttention(nn.Module):
    """Multi-head kernelised attention over feature-map tokens, O(N) in the number of tokens.

    With feature map phi = ReLU (as in EfficientViT), softmax(QK^T)V is replaced by
    phi(Q) (phi(K)^T V) / (phi(Q) sum_n phi(K_n)): the d x d summary phi(K)^T V is formed once,
    so cost grows linearly with H*W instead of quadratically.
    """

    def __init__(self, channels: int, heads: int, eps: float = 1e-6):
        super().__init__()
        self.heads = heads
        self.eps = eps
        self.qkv = nn.Conv2d(channels, 3 * channels, 1, bias=False)
        self.proj = ConvBNAct(channels, channels, 1, act=None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, channels, height, width = x.shape
        qkv = self.qkv(x).reshape(batch, 3, self.heads, channels // self.heads, height * width)
        # Attention arithmetic in float32: the normaliser is a sum over all tokens.
        q, k, v = (t.float() for t in qkv.unbind(1))  # each (B, heads, d, N)
        q, k = torch.relu(q), torch.relu(k)
        summary = torch.einsum("bhdn,bhen->bhde", k, v)  # phi(K)^T V: (B, heads, d, d)
        numerator = torch.einsum("bhdn,bhde->bhen", q, summary)  # (B, heads, d, N)
        denominator = torch.einsum("bhdn,bhd->bhn", q, k.sum(-1)).unsqueeze(2) + self.eps
        out = (numerator / denominator).to(x.dtype).reshape(batch, channels, height, width)
        return self.proj(out)


class LinearAttentionBlock(nn.Module):
    """Pre-norm transformer block on feature maps: x + attention(x), then x + FFN(x)."""

    def __init__(self, channels: int, heads: int, ffn: float, act: str):
        super().__init__()
        hidden = max(1, int(round(channels * ffn)))
        self.norm1 = nn.BatchNorm2d(channels)
        self.attention = LinearAttention(channels, heads)
        self.norm2 = nn.BatchNorm2d(channels)
        self.ffn = nn.Sequential(ConvBNAct(channels, hidden, 1, act=act),
                                 ConvBNAct(hidden, channels, 1, act=None))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class ClassifierHead(nn.Module):
    """Optional 1x1 conv, global average pool, optional hidden FC, dropout, linear classifier."""

    def __init__(self, cin: int, width: int, hidden: int, act: str, dropout: float,
                 num_classes: int):
        super().__init__()
        self.conv = ConvBNAct(cin, width, 1, act=act) if width else nn.Identity()
        features = width or cin
        layers: list[nn.Module] = []
        if hidden:
            layers += [nn.Linear(features, hidden), ACTIVATION_MODULES[act]()]
            features = hidden
        layers += [nn.Dropout(dropout), nn.Linear(features, num_classes)]
        self.classifier = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.conv(x).mean((2, 3)))


def _linear_attention(cin: int, stage: dict, stride: int) -> nn.Module:
    # Attention keeps the shape; a depthwise-separable conv changes width or resolution first.
    blocks: list[nn.Module] = []
    if stride != 1 or cin != stage["width"]:
        blocks.append(DepthwiseSeparable(cin, stage["width"], 3, stride, stage["act"]))
    blocks.append(LinearAttentionBlock(stage["width"], stage["heads"], stage["ffn"], stage["act"]))
    return nn.Sequential(*blocks) if len(blocks) > 1 else blocks[0]


# The one dispatch table from block kind to constructor(in_channels, stage, stride).
BLOCKS = {
    "ds": lambda cin, s, stride: DepthwiseSeparable(cin, s["width"], s["kernel"], stride, s["act"], s["se"]),
    "ir": lambda cin, s, stride: InvertedResidual(cin, s["width"], s["kernel"], stride, s["expansion"],
                                                  s["act"], s["se"]),
    "la": _linear_attention,
}


class Network(nn.Module):
    """stem -> stages of blocks (the first block of a stage has its stride) -> head."""

    def __init__(self, stem: dict, stages: list[dict], head: dict, in_channels: int, num_classes: int):
        super().__init__()
        # The input resized to `size` (height, width) first (bilinear, as deployed: the exported
        # graph holds the Resize); None takes it as it comes. No module, so no weight depends on
        # it: a lower rung of a search may set another size (eas.nas.rungs) and train the same weights.
        resolution = int(stem.get("resolution") or 0)
        self.size: tuple[int, int] | None = (resolution, resolution) if resolution else None
        self.stem = ConvBNAct(in_channels, stem["width"], stem["kernel"], stem["stride"], act=stem["act"])
        blocks, channels = [], stem["width"]
        for stage in stages:
            for index in range(stage["repeats"]):
                blocks.append(BLOCKS[stage["kind"]](channels, stage, stage["stride"] if index == 0 else 1))
                channels = stage["width"]
        self.blocks = nn.Sequential(*blocks)
        self.head = ClassifierHead(channels, head["width"], head["ffn"], head["act"], head["dropout"],
                                   num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.size is not None:
            x = nn.functional.interpolate(x, size=self.size, mode="bilinear", align_corners=False)
        return self.head(self.blocks(self.stem(x)))
