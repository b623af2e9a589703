"""What a network needs on a microcontroller, counted from its genome: SRAM and flash.

A microcontroller runs the int8 network from flash and keeps its activations in one SRAM arena
that an interpreter plans ahead (TensorFlow Lite Micro's greedy planner, ExecuTorch's memory
plan): a tensor holds its place from the operator that writes it to the last one that reads it,
and tensors whose lives do not overlap share bytes. So the SRAM a network needs is not its
largest tensor but what is alive at once: a block's input and output, the padded copy a strided
convolution reads, the input a residual keeps until its addition.

`int8_graph` lays out the operators that converting the built network (eas.arch.blocks) to a
fully int8 TFLite model gives, as litert-torch and ai-edge-quantizer produce it: BatchNorm folded
into the convolution before it (a pre-norm one, before attention and its FFN, stays as four
elementwise operators), ReLU and ReLU6 fused, other activations as operators of their own, an
explicit PAD where TFLite's SAME padding differs from PyTorch's (a stride-2 convolution of an even
size), layout transposes where PyTorch's NCHW code meets TFLite's NHWC. `sram_bytes` plans that
graph's activations as TFLite Micro's greedy planner does (16-byte aligned buffers, largest first, each
at the lowest offset free for its lifetime); `flash_bytes` sums int8 weights, int32 biases, the
per-channel quantisation parameters and the flatbuffer's per-tensor and per-operator overhead.
benchmarks/microcontroller_truth.py checks both against the real converter and interpreter.
No torch here: this runs for every proposal, before training, like eas.arch.counting.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from eas.arch.channels import make_divisible
from eas.arch.genome import Arch, Stage

ALIGNMENT = 16  # TFLite Micro aligns every arena buffer to 16 bytes
FUSED = ("relu", "relu6")  # the converter fuses these into the operator before them
# Flatbuffer bytes besides the weights: per tensor (shape, per-tensor quantisation, its buffer
# entry), per operator (inputs, outputs, options), once. Least squares over 30 converted networks
# of tiny and mobile at 28 and 32 px (largest error 0.4%); benchmarks/microcontroller_truth.py
# checks them on other networks.
TENSOR_OVERHEAD = 84
OPERATOR_OVERHEAD = 34
FILE_OVERHEAD = 1228


def same_padding_before(size: int, out: int, kernel: int, stride: int) -> int:
    """The zeros TFLite's SAME padding puts before the first row (the rest go after): PyTorch's
    symmetric kernel // 2 matches it at stride 1 and at stride 2 on odd sizes only."""
    return max((out - 1) * stride + kernel - size, 0) // 2


@dataclass
class Operator:
    kind: str
    inputs: tuple[int, ...]  # activation tensors read
    output: int  # the activation tensor written


@dataclass
class Int8Graph:
    """The activations (bytes each) and operators of the int8 network, in execution order, and
    its constants: int8 weight values, per-channel (int32 bias + quantisation) channel count and
    the number of constant tensors."""

    sizes: list[int] = field(default_factory=list)
    operators: list[Operator] = field(default_factory=list)
    weight_values: int = 0
    channels: int = 0
    constants: int = 0

    def tensor(self, size: int) -> int:
        self.sizes.append(size)
        return len(self.sizes) - 1

    def op(self, kind: str, inputs: tuple[int, ...], size: int, constants: int = 0) -> int:
        out = self.tensor(size)
        self.operators.append(Operator(kind, inputs, out))
        self.constants += constants
        return out

    def weighted(self, kind: str, x: int, size: int, weights: int, channels: int) -> int:
        """A convolution or fully-connected layer: int8 weights, an int32 bias per output channel."""
        self.weight_values += weights
        self.channels += channels
        return self.op(kind, (x,), size, constants=2)

    def activation(self, act: str | None, x: int) -> int:
        if act is None or act in FUSED:
            return x
        # silu becomes LOGISTIC then MUL; the others one operator each
        if act == "silu":
            return self.op("MUL", (x, self.op("LOGISTIC", (x,), self.sizes[x])), self.sizes[x])
        return self.op({"hswish": "HARD_SWISH", "gelu": "GELU"}[act], (x,), self.sizes[x])

    def conv(self, x: int, cin: int, cout: int, kernel: int, stride: int, size: tuple[int, int],
             groups: int = 1, act: str | None = None) -> tuple[int, tuple[int, int]]:
        h, w = size
        out = ((h - 1) // stride + 1, (w - 1) // stride + 1)
        pad = kernel // 2
        if any(same_padding_before(n, m, kernel, stride) != pad for n, m in ((h, out[0]), (w, out[1]))):
            # TFLite's SAME padding would put fewer zeros first than PyTorch's: an explicit PAD
            x = self.op("PAD", (x,), cin * (h + 2 * pad) * (w + 2 * pad), constants=1)
        # a convolution of one input channel is converted as a depthwise one: the same weights
        kind = "DEPTHWISE_CONV_2D" if groups > 1 or cin == 1 else "CONV_2D"
        y = self.weighted(kind, x, cout * out[0] * out[1], cin // groups * cout * kernel * kernel, cout)
        return self.activation(act, y), out

    def batchnorm(self, x: int) -> int:
        """A BatchNorm no convolution precedes: (x - mean) * 1/sqrt(var + eps) * gamma + beta."""
        for kind in ("SUB", "MUL", "MUL", "ADD"):
            x = self.op(kind, (x,), self.sizes[x], constants=1)
        return x

    def squeeze_excite(self, x: int, channels: int, size: tuple[int, int]) -> int:
        squeezed = make_divisible(channels // 4, 8)
        pooled = self.op("MEAN", (x,), channels, constants=1)
        reduced = self.weighted("CONV_2D", pooled, squeezed, channels * squeezed, squeezed)
        expanded = self.weighted("CONV_2D", reduced, channels, channels * squeezed, channels)
        gate = self.op("MUL", (expanded,), channels, constants=1)  # the hard sigmoid's scale
        return self.op("MUL", (x, gate), channels * size[0] * size[1])

    def depthwise_separable(self, x: int, cin: int, cout: int, kernel: int, stride: int, se: bool, size,
                            act: str):
        x, size = self.conv(x, cin, cin, kernel, stride, size, groups=cin, act=act)
        if se:
            x = self.squeeze_excite(x, cin, size)
        return self.conv(x, cin, cout, 1, 1, size, act=act)

    def inverted_residual(self, x: int, cin: int, stage: Stage, stride: int, size):
        hidden = int(round(cin * stage.expansion))
        y = x
        if hidden != cin:
            y, _ = self.conv(y, cin, hidden, 1, 1, size, act=stage.act)
        y, out = self.conv(y, hidden, hidden, stage.kernel, stride, size, groups=hidden, act=stage.act)
        if stage.se:
            y = self.squeeze_excite(y, hidden, out)
        y, out = self.conv(y, hidden, stage.width, 1, 1, out)
        if stride == 1 and cin == stage.width:
            y = self.op("ADD", (x, y), self.sizes[y])
        return y, out

    def linear_attention(self, x: int, cin: int, stage: Stage, stride: int, size):
        if stride != 1 or cin != stage.width:
            x, size = self.depthwise_separable(x, cin, stage.width, 3, stride, False, size, stage.act)
        c, tokens, heads = stage.width, size[0] * size[1], stage.heads
        d = c // heads
        values = c * tokens
        qkv, _ = self.conv(self.batchnorm(x), c, 3 * c, 1, 1, size)
        qkv = self.op("RESHAPE", (self.op("TRANSPOSE", (qkv,), 3 * values, constants=1),), 3 * values, constants=1)
        q, k, v = (self.op("SLICE", (qkv,), values, constants=2) for _ in range(3))
        v = self.op("RESHAPE", (v,), values, constants=1)
        q = self.op("RESHAPE", (self.op("RELU", (q,), values),), values, constants=1)
        k = self.op("RESHAPE", (self.op("RELU", (k,), values),), values, constants=1)
        summary = self.op("BATCH_MATMUL", (k, v), heads * d * d)
        numerator = self.op("BATCH_MATMUL", (summary, q), values)
        k_sum = self.op("SUM", (k,), heads * d, constants=1)
        denominator = self.op("BATCH_MATMUL", (q, k_sum), heads * tokens)
        denominator = self.op("ADD", (denominator,), heads * tokens, constants=1)  # + eps
        denominator = self.op("RESHAPE", (denominator,), heads * tokens, constants=1)
        attended = self.op("DIV", (numerator, denominator), values)
        attended = self.op("TRANSPOSE", (self.op("RESHAPE", (attended,), values, constants=1),), values, constants=1)
        projected, _ = self.conv(attended, c, c, 1, 1, size)
        x = self.op("ADD", (x, projected), values)
        hidden = max(1, int(round(c * stage.ffn)))
        y, _ = self.conv(self.batchnorm(x), c, hidden, 1, 1, size, act=stage.act)
        y, _ = self.conv(y, hidden, c, 1, 1, size)
        return self.op("ADD", (x, y), values), size

    def head(self, x: int, cin: int, arch: Arch, num_classes: int, size) -> int:
        head = arch.head
        if head.width:
            x, _ = self.conv(x, cin, head.width, 1, 1, size, act=head.act)
        features = head.width or cin
        x = self.op("TRANSPOSE", (x,), self.sizes[x], constants=1)  # back to NCHW for the pooling
        x = self.op("MEAN", (x,), features, constants=1)
        if head.ffn:
            x = self.activation(head.act, self.weighted("FULLY_CONNECTED", x, head.ffn, features * head.ffn,
                                                        head.ffn))
            features = head.ffn
        return self.weighted("FULLY_CONNECTED", x, num_classes, features * num_classes, num_classes)


@functools.lru_cache(maxsize=4096)
def int8_graph(arch: Arch, input_shape: tuple[int, int, int], num_classes: int) -> Int8Graph:
    """The operators of `arch` converted to a fully int8 TFLite model, at batch 1."""
    graph = Int8Graph()
    channels, height, width = input_shape
    x = graph.tensor(channels * height * width)  # the int8 input, NCHW as the model takes it
    x = graph.op("RESHAPE" if channels == 1 else "TRANSPOSE", (x,), graph.sizes[x], constants=1)  # to NHWC
    if arch.stem.resolution:  # the network's own resize: input and resized image alive together
        channels, height, width = arch.sees(input_shape)
        x = graph.op("RESIZE_BILINEAR", (x,), channels * height * width, constants=1)
    stem = arch.stem
    x, size = graph.conv(x, channels, stem.width, stem.kernel, stem.stride, (height, width), act=stem.act)
    channels = stem.width
    for stage in arch.stages:
        for index in range(stage.repeats):
            stride = stage.stride if index == 0 else 1
            if stage.kind == "ds":
                x, size = graph.depthwise_separable(x, channels, stage.width, stage.kernel, stride, stage.se, size,
                                                    stage.act)
            elif stage.kind == "ir":
                x, size = graph.inverted_residual(x, channels, stage, stride, size)
            else:
                x, size = graph.linear_attention(x, channels, stage, stride, size)
            channels = stage.width
    graph.head(x, channels, arch, num_classes, size)
    return graph


def lifetimes(graph: Int8Graph) -> list[tuple[int, int]]:
    """(first, last) operator index of each activation tensor: written by its operator (the input
    by none: from the start), read until its last reader (the output: until the end)."""
    spans = [[0, 0] for _ in graph.sizes]
    for index, op in enumerate(graph.operators):
        spans[op.output] = [index, index]
        for tensor in op.inputs:
            spans[tensor][1] = index
    spans[graph.operators[-1].output][1] = len(graph.operators) - 1
    return [(first, last) for first, last in spans]


def greedy_arena(sizes: list[int], spans: list[tuple[int, int]], alignment: int = ALIGNMENT) -> int:
    """The arena TFLite Micro's greedy planner lays out: buffers largest first (ties in tensor
    order), each at the lowest offset where it overlaps no placed buffer that is alive at the
    same time. Returns the arena's size in bytes."""
    aligned = [-(-size // alignment) * alignment for size in sizes]
    order = sorted(range(len(sizes)), key=lambda i: -aligned[i])
    placed: list[tuple[int, int, int, int]] = []  # (offset, end, first, last), kept sorted by offset
    arena = 0
    for i in order:
        first, last = spans[i]
        offset = 0
        for start, end, other_first, other_last in placed:
            if other_last < first or last < other_first:
                continue  # not alive at the same time: may share bytes
            if start - offset >= aligned[i]:
                break  # fits in the gap before this one
            offset = max(offset, end)
        placed.append((offset, offset + aligned[i], first, last))
        placed.sort()
        arena = max(arena, offset + aligned[i])
    return arena


def sram_bytes(arch: Arch, input_shape: tuple[int, int, int], num_classes: int) -> int:
    """Peak SRAM of the int8 activations at batch 1, as a TFLite Micro arena plans them."""
    graph = int8_graph(arch, input_shape, num_classes)
    return greedy_arena(graph.sizes, lifetimes(graph))


def flash_bytes(arch: Arch, input_shape: tuple[int, int, int], num_classes: int) -> int:
    """Bytes of the int8 model file: weights, int32 biases, per-channel scales and zero points
    (for weights and biases: 2 x (4 + 8) bytes a channel), and the flatbuffer's overhead."""
    graph = int8_graph(arch, input_shape, num_classes)
    tensors = len(graph.sizes) + graph.constants
    return (graph.weight_values + graph.channels * (4 + 24) + TENSOR_OVERHEAD * tensors
            + OPERATOR_OVERHEAD * len(graph.operators) + FILE_OVERHEAD)


# What the converter writes for these activations has no kernel in TensorFlow Lite Micro: such a
# network converts, and its SRAM and flash are counted, but the interpreter refuses to load it
# (benchmarks/microcontroller_truth.py: "Didn't find op for builtin opcode 'GELU'").
NO_MICRO_KERNEL = ("gelu",)


def without_micro_kernel(space) -> list[str]:
    """The choices of `space` a microcontroller cannot run, e.g. ["stage3.act: gelu"]."""
    found = []
    for part, spec in space.parts():
        acts = spec.get("act", [])
        acts = acts if isinstance(acts, list) else [acts]
        found += [f"{part}.act: {act}" for act in acts if act in NO_MICRO_KERNEL]
    return found
