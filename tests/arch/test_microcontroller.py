"""SRAM and flash of the int8 network, counted from the genome (eas.arch.microcontroller).

The arena figures below were measured as benchmarks/microcontroller_truth.py measures: each
network built by EAS (its BatchNorms given trained-like scales, shifts and statistics), converted
with litert-torch 0.10 and quantised fully to int8 with ai-edge-quantizer 0.10 (static, int8
weights and activations), then loaded by TensorFlow Lite Micro's interpreter (tflite-micro's
Python package), whose recording allocator printed the arena's planned head. The counting must give
those numbers without torch or any converter. benchmarks/microcontroller_truth.py repeats the
check on many networks of every space."""

import pytest

from eas.arch.genome import Arch
from eas.arch.microcontroller import flash_bytes, greedy_arena, int8_graph, lifetimes, sram_bytes
from eas.arch.space import load_space

MEASURED_ARENA = [  # genome at 1x28x28, 10 classes -> TFLite Micro's arena head in bytes
    # residual block, squeeze-excite, hard-swish; the peak is the PAD before a 5x5 stride-2
    # depthwise conv: its 48x14x14 input (9,408 B) and its 48x18x18 padded copy (15,552 B)
    ("stem_c16_k3_s2_relu6-ir_r1_k3_s1_e1_c16_relu6-ir_r2_k5_s2_e3_c24_se_hswish-head_c0_f0_relu6_d0", 24960),
    ("stem_c8_k3_s1_relu-ds_r2_k5_s2_c16_hswish-ir_r2_k3_s2_e2_c32_hswish-head_c0_f0_relu_d0", 14464),
    ("stem_c16_k3_s1_hswish-ds_r1_k5_s2_c16_relu-ir_r1_k3_s2_e2_c24_se_relu6-la_r1_s1_c32_h2_f1_hswish"
     "-head_c64_f0_relu_d0", 28928),
    ("stem_c8_k3_s1_hswish-ds_r2_k5_s2_c24_relu-ir_r2_k3_s2_e4_c24_se_relu6-la_r1_s1_c32_h4_f1_hswish"
     "-head_c64_f0_relu_d0", 43392),
]


@pytest.mark.parametrize("genome, arena", MEASURED_ARENA)
def test_sram_is_the_arena_tflite_micro_plans(genome, arena):
    assert sram_bytes(Arch.decode(genome), (1, 28, 28), 10) == arena


def test_the_operators_are_those_the_converter_writes():
    """Linear attention (its pre-norms as four elementwise operators), squeeze-excite, a head conv:
    the operator list of the converted model."""
    graph = int8_graph(Arch.decode(MEASURED_ARENA[2][0]), (1, 28, 28), 10)
    assert [op.kind for op in graph.operators] == [
        "RESHAPE", "DEPTHWISE_CONV_2D", "HARD_SWISH", "PAD", "DEPTHWISE_CONV_2D", "CONV_2D", "CONV_2D", "PAD",
        "DEPTHWISE_CONV_2D", "MEAN", "CONV_2D", "CONV_2D", "MUL", "MUL", "CONV_2D", "DEPTHWISE_CONV_2D",
        "HARD_SWISH", "CONV_2D", "HARD_SWISH", "SUB", "MUL", "MUL", "ADD", "CONV_2D", "TRANSPOSE", "RESHAPE",
        "SLICE", "SLICE", "SLICE", "RESHAPE", "RELU", "RESHAPE", "RELU", "RESHAPE", "BATCH_MATMUL",
        "BATCH_MATMUL", "SUM", "BATCH_MATMUL", "ADD", "RESHAPE", "DIV", "RESHAPE", "TRANSPOSE", "CONV_2D", "ADD",
        "SUB", "MUL", "MUL", "ADD", "CONV_2D", "HARD_SWISH", "CONV_2D", "ADD", "CONV_2D", "TRANSPOSE", "MEAN",
        "FULLY_CONNECTED"]


def test_tensors_that_live_apart_share_bytes_and_those_alive_together_do_not():
    # a chain a -> b -> c: a and c never live at once, so c reuses a's bytes
    assert greedy_arena([160, 320, 160], [(0, 0), (0, 1), (1, 1)]) == 480
    # a kept until the end (a residual): nothing can reuse its bytes
    assert greedy_arena([160, 320, 160], [(0, 2), (0, 1), (1, 2)]) == 640
    # sizes are aligned to 16 bytes, as TFLite Micro does
    assert greedy_arena([1, 1], [(0, 1), (0, 1)]) == 32


def test_the_planner_fills_a_gap_before_going_higher():
    # the largest at 0; the second, alive with it, above it (320..480); the third lives only with
    # the second, so it takes the gap at 0 instead of going on top (which would make 608)
    assert greedy_arena([320, 160, 128], [(0, 0), (0, 2), (2, 2)]) == 480


def test_a_residual_keeps_its_input_alive_until_the_addition():
    arch = Arch.decode("stem_c16_k3_s1_relu6-ir_r2_k3_s1_e4_c16_relu6-head_c0_f0_relu6_d0")
    graph = int8_graph(arch, (1, 8, 8), 10)
    spans = lifetimes(graph)
    adds = [i for i, op in enumerate(graph.operators) if op.kind == "ADD"]
    assert len(adds) == 2
    block_input = graph.operators[adds[0]].inputs[0]
    assert spans[block_input][1] == adds[0]  # read last by the addition, three operators after its block began
    assert spans[block_input][1] - spans[block_input][0] == 4


def test_memory_grows_with_resolution_and_width_and_flash_with_parameters():
    small = Arch.decode("stem_c8_k3_s2_relu6-ir_r1_k3_s2_e3_c16_relu6-head_c0_f0_relu6_d0")
    wide = Arch.decode("stem_c16_k3_s2_relu6-ir_r1_k3_s2_e3_c32_relu6-head_c0_f0_relu6_d0")
    assert sram_bytes(small, (1, 32, 32), 10) > sram_bytes(small, (1, 16, 16), 10)
    assert sram_bytes(wide, (1, 32, 32), 10) > sram_bytes(small, (1, 32, 32), 10)
    assert flash_bytes(wide, (1, 32, 32), 10) > flash_bytes(small, (1, 32, 32), 10)
    assert flash_bytes(small, (1, 32, 32), 10) == flash_bytes(small, (1, 16, 16), 10)  # weights only


@pytest.mark.parametrize("space_name", ["tiny", "mobile", "hybrid"])
def test_every_space_counts_and_a_three_channel_input_is_transposed(space_name):
    space = load_space(space_name).for_task((3, 32, 32))
    smallest, largest = space.extremes((3, 32, 32), 10)
    for arch in (smallest, largest):
        graph = int8_graph(arch, (3, 32, 32), 10)
        assert graph.operators[0].kind == "TRANSPOSE"  # NCHW to NHWC, a copy
        assert sram_bytes(arch, (3, 32, 32), 10) >= 3 * 32 * 32 * 2
    assert sram_bytes(smallest, (3, 32, 32), 10) <= sram_bytes(largest, (3, 32, 32), 10)
    assert flash_bytes(smallest, (3, 32, 32), 10) < flash_bytes(largest, (3, 32, 32), 10)


def test_a_spaces_cost_ranges_hold_its_networks():
    import random

    space = load_space("tiny").for_task((1, 28, 28))
    ranges = space.cost_ranges((1, 28, 28), 10)
    rng = random.Random(0)
    for _ in range(40):
        arch = space.arch_from_params({k: rng.choice(v) for k, v in space.parameters().items()})
        assert ranges["sram_bytes"][0] <= sram_bytes(arch, (1, 28, 28), 10) <= ranges["sram_bytes"][1]
        assert ranges["flash_bytes"][0] <= flash_bytes(arch, (1, 28, 28), 10) <= ranges["flash_bytes"][1]
    assert all(low < high for low, high in ranges.values())


def test_a_pad_stands_where_tflite_same_padding_differs_from_pytorchs():
    from eas.arch.microcontroller import same_padding_before

    assert same_padding_before(14, 7, 3, 2) == 0  # even size: SAME pads after only, PyTorch both sides
    assert same_padding_before(7, 4, 3, 2) == 1  # odd size: the same as PyTorch's
    assert same_padding_before(14, 14, 5, 1) == 2  # stride 1: always the same
    odd = int8_graph(Arch.decode("stem_c8_k3_s1_relu6-ir_r1_k3_s2_e3_c16_relu6-head_c0_f0_relu6_d0"), (1, 7, 7), 10)
    even = int8_graph(Arch.decode("stem_c8_k3_s1_relu6-ir_r1_k3_s2_e3_c16_relu6-head_c0_f0_relu6_d0"), (1, 8, 8), 10)
    assert "PAD" not in [op.kind for op in odd.operators] and "PAD" in [op.kind for op in even.operators]
