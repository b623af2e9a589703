"""One network that holds every architecture of a space: the weight-sharing supernet.

Once-for-All / BigNAS style: each stage keeps its deepest, widest, largest-kernel, highest-
expansion blocks (SE included where any choice has it); a sub-network takes the first `depth`
blocks of each stage, the first channels of every tensor (channels are sorted by importance
during training, so the first ones are the ones that matter) and the centre of every kernel.

A sub-network is not a second kind of model: it is the very eas.arch.blocks.Network that
`build(arch)` makes, given slices of the supernet's tensors by name. Training runs it with
`torch.func.functional_call` on a network built on the meta device (no memory, no init), so the
gradients flow into the shared tensors; a search copies the slices into a real network.

What cannot be sliced gets its own tensors: a linear-attention stage's first block always has
the depthwise-separable transition (used when the sub-network changes width or resolution there),
and the classifier has one weight per place its input can come from (the head's 1x1 conv, or the
last stage when a head without conv is chosen).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from torch import nn

from eas.arch.blocks import BLOCKS, ConvBNAct, DepthwiseSeparable, Network
from eas.arch.builder import build
from eas.arch.genome import Arch, arch_spec
from eas.arch.space import Space, SpaceError, choices_of, cost_order


class ElasticError(SpaceError):
    """A space, arch or stored supernet that the supernet cannot hold or serve."""


@dataclass(frozen=True)
class Placement:
    """Where a sub-network sits in the supernet: the space stage of each of its stages, and
    where its classifier's input comes from."""

    stages: tuple[int, ...]  # space stage index (0-based) of each arch stage
    classifier: str          # "conv" or "stage<i>"


def _max(values):
    return max(values, key=cost_order)


class Supernet(nn.Module):
    """The shared tensors of every sub-network of `space` (adapted to the task's input shape)."""

    def __init__(self, space: Space, input_shape: tuple[int, int, int], num_classes: int):
        super().__init__()
        self.space, self.input_shape, self.num_classes = space.for_task(input_shape), tuple(input_shape), num_classes
        head = space.definition["head"]
        if any(v for v in choices_of(head.get("hidden", 0))):
            raise ElasticError(f"space {space.name!r}: a head with a hidden layer is not elastic yet "
                               "(one-shot search needs head hidden: 0)")
        stem = space.definition["stem"]
        self.stem = ConvBNAct(input_shape[0], _max(choices_of(stem["width"])), _max(choices_of(stem.get("kernel", 3))),
                              act=choices_of(stem.get("act", "relu6"))[0])
        widest_in = self._widest_inputs()
        self.stages = nn.ModuleList()
        for index, spec in enumerate(self.space.stages):
            largest = self._largest_stage(spec)
            blocks = nn.ModuleList()
            for repeat in range(_max(choices_of(spec.get("depth", 1)))):
                cin = widest_in[index] if repeat == 0 else largest["width"]
                if spec["kind"] == "la" and repeat == 0:
                    blocks.append(nn.Sequential(
                        DepthwiseSeparable(cin, largest["width"], 3, 1, largest["act"]),
                        BLOCKS["la"](largest["width"], largest, 1)))
                else:
                    blocks.append(BLOCKS[spec["kind"]](cin, largest, 1))
            self.stages.append(blocks)
        head_widths = choices_of(head.get("width", 0))
        self.head_conv = (ConvBNAct(widest_in[-1], max(head_widths), 1, act=choices_of(head.get("act", "relu6"))[0])
                          if max(head_widths) else None)
        self.classifiers = nn.ModuleDict()
        if max(head_widths):
            self.classifiers["conv"] = nn.Linear(max(head_widths), num_classes)
        if 0 in head_widths:
            for i in self._possible_last():
                self.classifiers[f"stage{i}"] = nn.Linear(_max(choices_of(self.space.stages[i]["width"])), num_classes)

    def _stage_can_vanish(self, index: int) -> bool:
        return 0 in choices_of(self.space.stages[index].get("depth", 1))

    def _widest_inputs(self) -> list[int]:
        """Widest input of each stage (and, last, of the head): a skipped stage passes on the
        width of the one before it."""
        widest = [_max(choices_of(self.space.definition["stem"]["width"]))]  # what stage 0 may receive
        reachable = [widest[0]]  # widths that may arrive at the next stage
        for index, spec in enumerate(self.space.stages):
            own = _max(choices_of(spec["width"]))
            reachable = [*reachable, own] if self._stage_can_vanish(index) else [own]
            widest.append(max(reachable))
        return widest

    def _possible_last(self) -> list[int]:
        """Space stages that may be a sub-network's last."""
        last = []
        for index in reversed(range(len(self.space.stages))):
            last.append(index)
            if not self._stage_can_vanish(index):
                break
        return last

    @staticmethod
    def _largest_stage(spec: dict) -> dict:
        heads = choices_of(spec.get("heads", 0))
        width = _max(choices_of(spec["width"]))
        return {"kind": spec["kind"], "width": width, "kernel": _max(choices_of(spec.get("kernel", 3))),
                "expansion": float(_max(choices_of(spec.get("expansion", 1)))),
                "se": any(choices_of(spec.get("se", False))),
                "act": choices_of(spec.get("act", "relu6"))[0], "ffn": float(_max(choices_of(spec.get("ffn", 0)))),
                "heads": next((h for h in heads if h and width % h == 0), 1)}

    # -- sub-networks ------------------------------------------------------------------
    def sample_params(self, rng: random.Random, which: str = "random") -> dict:
        """Space parameters of the largest, the smallest or a random sub-network."""
        pick = {"largest": lambda c: _max(c), "smallest": lambda c: min(c, key=cost_order),
                "random": rng.choice}[which]
        return {name: pick(choices) for name, choices in self.space.parameters().items()
                if not name.startswith("train.")}

    def placement(self, arch: Arch) -> Placement:
        """Where `arch` sits in this supernet; an arch the space cannot make is refused."""
        params = self.space.params_of(arch)
        if params is None:
            raise ElasticError(f"architecture {arch.encode()} is not in space {self.space.name!r}")
        stages = tuple(i for i, spec in enumerate(self.space.stages)
                       if params.get(f"stage{i + 1}.depth", choices_of(spec.get("depth", 1))[0]) != 0)
        return Placement(stages, "conv" if arch.head.width else f"stage{stages[-1]}")

    def skeleton(self, arch: Arch) -> Network:
        """`arch`'s network on the meta device: its structure and tensor shapes, nothing allocated."""
        spec = arch_spec(self.space.adapt(arch))
        with torch.device("meta"):
            return Network(spec["stem"], spec["stages"], spec["head"], self.input_shape[0], self.num_classes)

    def tensors_for(self, arch: Arch, skeleton: Network | None = None) -> dict[str, torch.Tensor]:
        """Every parameter and buffer of `arch`'s network, by its name there, as slices (views,
        where slicing allows) of this supernet's tensors. `skeleton`: that network (on any
        device, meta included) when the caller has it; only its names and shapes are read."""
        skeleton = skeleton or self.skeleton(arch)
        placement = self.placement(arch)
        shared = dict(self.named_parameters()) | dict(self.named_buffers())
        block_home = [(stage, repeat) for position, stage in enumerate(placement.stages)
                      for repeat in range(arch.stages[position].repeats)]
        tensors = {}
        for name, target in [*skeleton.named_parameters(), *skeleton.named_buffers()]:
            source = self._source_name(name, block_home, placement)
            tensors[name] = _slice(shared[source], target.shape, qkv=name.endswith("attention.qkv.weight"))
        return tensors

    def _source_name(self, name: str, block_home: list[tuple[int, int]], placement: Placement) -> str:
        part, _, rest = name.partition(".")
        if part == "stem":
            return name
        if part == "blocks":
            index, _, inner = rest.partition(".")
            stage, repeat = block_home[int(index)]
            if self.space.stages[stage]["kind"] == "la" and repeat == 0 and not inner.split(".")[0].isdigit():
                inner = "1." + inner  # no transition in this sub-network: its block is the second module
            return f"stages.{stage}.{repeat}.{inner}"
        # head.conv.<...> or head.classifier.<n>.<weight|bias> (no hidden layer: the last Linear)
        if rest.startswith("conv."):
            return "head_conv." + rest.removeprefix("conv.")
        return f"classifiers.{placement.classifier}.{rest.rsplit('.', 1)[1]}"

    def extract(self, arch: Arch) -> Network:
        """`arch`'s network with its own copy of the inherited weights (BatchNorm statistics as
        the supernet left them: recalibrate before use)."""
        model = build(arch, self.input_shape, self.num_classes)
        model.load_state_dict({k: v.detach().clone() for k, v in self.tensors_for(arch, model).items()})
        return model


def _slice(tensor: torch.Tensor, shape: torch.Size, qkv: bool = False) -> torch.Tensor:
    """The leading channels of every dimension, the centre of a convolution's kernel; the
    query/key/value projection slices each of its three parts."""
    if tensor.dim() == 0:
        return tensor
    if qkv:  # rows are (q, k, v) x channels: keep the first `width` rows of each part
        width, full = shape[1], tensor.shape[1]
        return tensor.view(3, full, full, *tensor.shape[2:])[:, :width, :width].reshape(shape)
    index = []
    for axis, (have, want) in enumerate(zip(tensor.shape, shape, strict=True)):
        if want > have:
            raise ElasticError(f"a sub-network tensor of shape {tuple(shape)} does not fit the supernet's "
                               f"{tuple(tensor.shape)}")
        start = (have - want) // 2 if tensor.dim() == 4 and axis >= 2 else 0
        index.append(slice(start, start + want))
    return tensor[tuple(index)]


# -- channel importance ------------------------------------------------------------------------

# Hidden channels that a block's parameters share, and the axis each tensor holds them on:
# (name suffix, axis). The first entry's role decides the order: the importance of a hidden
# channel is the L1 norm of the weights that read it (the projection's input), as in Once-for-All.
HIDDEN_CHANNELS = {
    "ir": (("project.0.weight", 1), ("expand.0.weight", 0), ("expand.1.weight", 0), ("expand.1.bias", 0),
           ("expand.1.running_mean", 0), ("expand.1.running_var", 0), ("depthwise.0.weight", 0),
           ("depthwise.1.weight", 0), ("depthwise.1.bias", 0), ("depthwise.1.running_mean", 0),
           ("depthwise.1.running_var", 0), ("se.reduce.weight", 1), ("se.expand.weight", 0), ("se.expand.bias", 0)),
    "la": (("ffn.1.0.weight", 1), ("ffn.0.0.weight", 0), ("ffn.0.1.weight", 0), ("ffn.0.1.bias", 0),
           ("ffn.0.1.running_mean", 0), ("ffn.0.1.running_var", 0)),
}


@torch.no_grad()
def sort_channels(supernet: Supernet, optimizer_state: dict | None = None) -> int:
    """Reorder each block's hidden channels, most important first, so that narrow sub-networks
    keep the channels that matter; the optimiser's per-parameter tensors (`optimizer.state`)
    are reordered with their parameters. Returns how many blocks were sorted."""
    tensors = dict(supernet.named_parameters()) | dict(supernet.named_buffers())
    sorted_blocks = 0
    for index, (stage, spec) in enumerate(zip(supernet.stages, supernet.space.stages, strict=True)):
        roles = HIDDEN_CHANNELS.get(spec["kind"])
        if roles is None:
            continue
        for repeat in range(len(stage)):
            prefix = f"stages.{index}.{repeat}."
            if spec["kind"] == "la" and repeat == 0:
                prefix += "1."
            owned = [(tensors[prefix + suffix], axis) for suffix, axis in roles if prefix + suffix in tensors]
            if spec["kind"] == "ir" and prefix + "expand.0.weight" not in tensors:
                continue  # hidden channels are the block's input channels: not the block's to reorder
            reader, axis = owned[0]
            importance = reader.abs().sum(dim=[d for d in range(reader.dim()) if d != axis])
            order = torch.argsort(importance, descending=True)
            for tensor, axis in owned:
                tensor.copy_(tensor.index_select(axis, order))
                moments = (optimizer_state or {}).get(tensor, {})
                for value in moments.values():
                    if isinstance(value, torch.Tensor) and value.shape == tensor.shape:
                        value.copy_(value.index_select(axis, order))
            sorted_blocks += 1
    return sorted_blocks
