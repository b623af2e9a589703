"""The cost of a genome counted from its fields, without building it (no torch, microseconds).

It follows eas/blocks.py layer by layer and the conventions of eas.arch.profile: parameters; MACs of
convolutions, linear layers and matrix products; inference memory = fp32 weights + the largest
input + output of one leaf layer. Tests check it against `eas.arch.profile.profile` of the built model.
Two uses: refusing a genome or shape that would need unbounded memory *before* anything is
allocated, and checking thousands of proposals against MACs/params/memory limits cheaply.
Besides the totals it tallies work per kind of operator (`operators`: MACs, values read and
written, count; activation values per function; residual additions): the features of the
latency predictor (eas.measure.predictor), which prices each kind of kernel separately.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field

from eas.arch.channels import make_divisible
from eas.arch.genome import Arch, Stage


@dataclass(frozen=True)
class ArchCost:
    params: int
    macs: int
    peak_leaf_io: int  # values: largest input + output of one leaf layer, batch 1
    largest_tensor: int  # values: the largest single activation, batch 1
    kept_for_backward: int  # values: every leaf layer's output, batch 1
    operators: dict = field(default_factory=dict, compare=False)  # e.g. "dw5_macs", "act_hswish_values"

    @property
    def memory_bytes_training(self) -> int:
        """Weights, gradients and two AdamW moments, plus the activations kept for backward (batch 1)."""
        return 16 * self.params + 4 * self.kept_for_backward

    @property
    def memory_bytes_inference(self) -> int:
        return 4 * self.params + 4 * self.peak_leaf_io


class _Counter:
    def __init__(self) -> None:
        self.params = self.macs = self.peak = self.largest = self.kept = 0
        self.operators: Counter[str] = Counter()

    def add(self, other: _Counter) -> None:
        """Count `other`'s layers after this counter's."""
        self.operators.update(other.operators)
        self.params += other.params
        self.macs += other.macs
        self.peak = max(self.peak, other.peak)
        self.largest = max(self.largest, other.largest)
        self.kept += other.kept

    def leaf(self, values_in: int, values_out: int) -> None:
        self.peak = max(self.peak, values_in + values_out)
        self.largest = max(self.largest, values_in, values_out)
        self.kept += values_out

    def operator(self, kind: str, macs: int, values: int) -> None:
        self.operators.update({f"{kind}_macs": macs, f"{kind}_values": values, f"{kind}_count": 1})

    def conv_bn_act(self, cin: int, cout: int, kernel: int, stride: int, size: tuple[int, int],
                    groups: int = 1, act: str | None = None) -> tuple[int, int]:
        h, w = size
        out = ((h - 1) // stride + 1, (w - 1) // stride + 1)  # padding kernel // 2, odd kernels
        n_in, n_out = cin * h * w, cout * out[0] * out[1]
        self.params += cin // groups * cout * kernel * kernel + 2 * cout  # conv (no bias) + BN
        macs = n_out * (cin // groups) * kernel * kernel
        self.macs += macs
        kind = "pointwise" if kernel == 1 and groups == 1 else f"depthwise{kernel}" if 1 < groups == cin else "conv"
        self.operator(kind if kind == "pointwise" else f"{kind}_s{stride}", macs, n_in + n_out)
        self.leaf(n_in, n_out)  # conv
        self.leaf(n_out, n_out)  # BatchNorm
        if act:
            self.leaf(n_out, n_out)
            self.operators[f"act_{act}_values"] += n_out
        return out

    def squeeze_excite(self, channels: int) -> None:
        squeezed = make_divisible(channels // 4, 8)
        self.params += 2 * channels * squeezed + squeezed + channels
        self.macs += 2 * channels * squeezed
        self.operator("squeeze_excite", 2 * channels * squeezed, channels)
        self.leaf(channels, squeezed)
        self.leaf(squeezed, squeezed)
        self.leaf(squeezed, channels)
        self.leaf(channels, channels)

    def identity(self, values: int) -> None:
        self.leaf(values, values)

    def depthwise_separable(self, cin: int, cout: int, kernel: int, stride: int, se: bool, size, act: str):
        size = self.conv_bn_act(cin, cin, kernel, stride, size, groups=cin, act=act)
        self.squeeze_excite(cin) if se else self.identity(cin * size[0] * size[1])
        return self.conv_bn_act(cin, cout, 1, 1, size, act=act)

    def inverted_residual(self, cin: int, stage: Stage, stride: int, size):
        hidden = int(round(cin * stage.expansion))
        if hidden != cin:
            self.conv_bn_act(cin, hidden, 1, 1, size, act=stage.act)
        else:
            self.identity(cin * size[0] * size[1])
        size = self.conv_bn_act(hidden, hidden, stage.kernel, stride, size, groups=hidden, act=stage.act)
        self.squeeze_excite(hidden) if stage.se else self.identity(hidden * size[0] * size[1])
        size = self.conv_bn_act(hidden, stage.width, 1, 1, size)
        if stride == 1 and cin == stage.width:
            self.operators["residual_values"] += cin * size[0] * size[1]
        return size

    def linear_attention(self, cin: int, stage: Stage, stride: int, size):
        if stride != 1 or cin != stage.width:
            size = self.depthwise_separable(cin, stage.width, 3, stride, False, size, stage.act)
        c, tokens = stage.width, size[0] * size[1]
        hidden = max(1, int(round(c * stage.ffn)))
        self.params += 4 * c  # two pre-norm BatchNorms
        self.leaf(c * tokens, c * tokens)  # norm1
        self.params += 3 * c * c  # qkv 1x1 conv, no bias
        self.macs += 3 * c * c * tokens
        self.leaf(c * tokens, 3 * c * tokens)
        head_dim = c // stage.heads
        self.macs += 2 * c * head_dim * tokens + c * tokens  # phi(K)^T V, phi(Q) S, normaliser
        self.operator("attention", 3 * c * c * tokens + 2 * c * head_dim * tokens + c * tokens, 4 * c * tokens)
        self.conv_bn_act(c, c, 1, 1, size)  # proj
        self.leaf(c * tokens, c * tokens)  # norm2
        self.conv_bn_act(c, hidden, 1, 1, size, act=stage.act)
        self.conv_bn_act(hidden, c, 1, 1, size)
        self.operators["residual_values"] += 2 * c * tokens
        return size

    def head(self, cin: int, arch: Arch, num_classes: int, size) -> None:
        head = arch.head
        if head.width:
            self.conv_bn_act(cin, head.width, 1, 1, size, act=head.act)
        else:
            self.identity(cin * size[0] * size[1])
        features = head.width or cin
        if head.ffn:
            self.params += features * head.ffn + head.ffn
            self.macs += features * head.ffn
            self.operator("linear", features * head.ffn, features + head.ffn)
            self.leaf(features, head.ffn)
            self.leaf(head.ffn, head.ffn)
            features = head.ffn
        self.leaf(features, features)  # dropout
        self.params += features * num_classes + num_classes
        self.macs += features * num_classes
        self.operator("linear", features * num_classes, features + num_classes)
        self.leaf(features, num_classes)


def arch_cost(arch: Arch, input_shape: tuple[int, int, int], num_classes: int) -> ArchCost:
    """Parameters, MACs and inference memory of `arch` at batch 1, counted without torch."""
    count = _Counter()
    channels, height, width = arch.sees(input_shape)  # a resize first costs no MACs (as profile counts it)
    if (height, width) != tuple(input_shape[1:]):
        # ...but time: the latency predictor prices the values it reads and writes (eas.measure.predictor)
        count.operators.update({"resize_values": channels * (input_shape[1] * input_shape[2] + height * width),
                                "resize_count": 1})
    size = count.conv_bn_act(channels, arch.stem.width, arch.stem.kernel, arch.stem.stride, (height, width),
                             act=arch.stem.act)
    channels = arch.stem.width
    for stage in arch.stages:
        for index in range(stage.repeats):
            block, size = _block_cost(channels, stage, stage.stride if index == 0 else 1, size)
            count.add(block)
            channels = stage.width
    count.head(channels, arch, num_classes, size)
    count.operators["pool_values"] += channels * size[0] * size[1]  # global average pool
    return ArchCost(count.params, count.macs, count.peak, count.largest, count.kept, dict(count.operators))


@functools.lru_cache(maxsize=8192)
def _block_cost(cin: int, stage: Stage, stride: int, size: tuple[int, int]) -> tuple[_Counter, tuple[int, int]]:
    """One block's cost and output size. The same block at the same input recurs across a
    study's genomes: reading 10,000 stored trials counts a few thousand blocks, not 45,000."""
    count = _Counter()
    if stage.kind == "ds":
        size = count.depthwise_separable(cin, stage.width, stage.kernel, stride, stage.se, size, stage.act)
    else:
        size = {"ir": count.inverted_residual, "la": count.linear_attention}[stage.kind](cin, stage, stride, size)
    return count, size
