"""Structured pruning: remove the least important channels of every stage, so that the result
is again a genome of the same family (narrower widths) whose network inherits the surviving
weights. The dense tensors really shrink: parameters, MACs and latency go down, unlike masks.

Channels that must stay aligned are chosen together: every block of a stage adds into the
same residual stream, so one set of output channels is kept for the whole stage; the hidden
channels of an inverted residual and the squeeze of a squeeze-excite are chosen per block.
A channel's importance is the norm of the filter that produces it times its BatchNorm scale
(|gamma| / sqrt(running variance)), i.e. how large its output can be after normalisation.
Linear-attention stages keep their width: their channels are split over heads for queries,
keys and values, and the result of removing some is no longer the same block.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from eas.arch import blocks
from eas.arch.genome import Arch
from eas.errors import UserError


def kept_width(width: int, ratio: float) -> int:
    return max(1, round(width * (1 - ratio)))


def pruned_arch(arch: Arch, ratio: float) -> Arch:
    """The same family with `ratio` of each prunable width removed. A width that a following
    linear-attention stage takes in unchanged (no adapter in front of it) is kept, so that the
    pruned network has exactly the blocks of the original."""
    if not 0.0 <= ratio < 1.0:
        raise UserError(f"--prune must be a fraction in [0, 1) of the channels to remove (got {ratio})")
    parts = [arch.stem, *arch.stages]
    feeds_attention = [i + 1 < len(parts) and parts[i + 1].kind == "la" and parts[i + 1].stride == 1
                       and parts[i + 1].width == part.width for i, part in enumerate(parts)]
    narrowed = [part if keep or getattr(part, "kind", None) == "la"
                else replace(part, width=kept_width(part.width, ratio))
                for part, keep in zip(parts, feeds_attention, strict=True)]
    head = replace(arch.head, width=kept_width(arch.head.width, ratio)) if arch.head.width else arch.head
    return Arch(narrowed[0], tuple(narrowed[1:]), head)


def _importance(layer: blocks.ConvBNAct) -> torch.Tensor:
    conv, norm = layer[0], layer[1]
    scale = norm.weight.abs() / torch.sqrt(norm.running_var + norm.eps)
    return conv.weight.detach().flatten(1).norm(dim=1) * scale.detach()


def _top(importance: torch.Tensor, count: int) -> torch.Tensor:
    """The `count` most important channels, in their original order."""
    return torch.argsort(importance, descending=True)[:count].sort().values


def _conv_bn(old: blocks.ConvBNAct, new: blocks.ConvBNAct, inputs: torch.Tensor, outputs: torch.Tensor) -> None:
    conv = old[0].weight[outputs]
    new[0].weight.copy_(conv if old[0].groups > 1 else conv[:, inputs])  # a depthwise filter sees one channel
    for name in ("weight", "bias", "running_mean", "running_var"):
        getattr(new[1], name).copy_(getattr(old[1], name)[outputs])


def _squeeze_excite(old, new, channels: torch.Tensor) -> None:
    if isinstance(old, nn.Identity):
        return
    squeezed = _top(old.reduce.weight.flatten(1)[:, channels].norm(dim=1), new.reduce.out_channels)
    new.reduce.weight.copy_(old.reduce.weight[squeezed][:, channels])
    new.reduce.bias.copy_(old.reduce.bias[squeezed])
    new.expand.weight.copy_(old.expand.weight[channels][:, squeezed])
    new.expand.bias.copy_(old.expand.bias[channels])


def _output_layer(block: nn.Module) -> blocks.ConvBNAct:
    if isinstance(block, blocks.DepthwiseSeparable):
        return block.pointwise
    return block.project


def _block(old: nn.Module, new: nn.Module, inputs: torch.Tensor, outputs: torch.Tensor) -> None:
    if isinstance(old, blocks.DepthwiseSeparable):
        _conv_bn(old.depthwise, new.depthwise, inputs, inputs)
        _squeeze_excite(old.se, new.se, inputs)
        _conv_bn(old.pointwise, new.pointwise, inputs, outputs)
    elif isinstance(old, blocks.InvertedResidual):
        if isinstance(old.expand, nn.Identity) != isinstance(new.expand, nn.Identity):
            raise UserError("pruning this far leaves an inverted residual without its expansion; use a smaller "
                            "--prune")
        importance = _importance(old.depthwise) * old.project[0].weight.detach().flatten(1).norm(dim=0)
        hidden = inputs if isinstance(old.expand, nn.Identity) else _top(importance, new.depthwise[0].out_channels)
        if not isinstance(old.expand, nn.Identity):
            _conv_bn(old.expand, new.expand, inputs, hidden)
        _conv_bn(old.depthwise, new.depthwise, hidden, hidden)
        _squeeze_excite(old.se, new.se, hidden)
        _conv_bn(old.project, new.project, hidden, outputs)
    elif isinstance(old, nn.Sequential):  # linear attention behind a depthwise-separable adapter
        _block(old[0], new[0], inputs, outputs)
        new[1].load_state_dict(old[1].state_dict())
    else:  # a linear-attention block keeps its width
        new.load_state_dict(old.state_dict())


@torch.no_grad()
def inherit_weights(old: blocks.Network, new: blocks.Network, old_arch: Arch) -> None:
    """Fill `new` (built from pruned_arch(old_arch, r)) with the surviving weights of `old`."""
    stem = _top(_importance(old.stem), new.stem[0].out_channels)
    _conv_bn(old.stem, new.stem, torch.arange(old.stem[0].in_channels), stem)
    channels, index = stem, 0
    for stage in old_arch.stages:
        members = range(index, index + stage.repeats)
        if stage.kind == "la":
            outputs = torch.arange(stage.width)
        else:
            importance = sum(_importance(_output_layer(old.blocks[i])) for i in members)
            outputs = _top(importance, _output_layer(new.blocks[index])[0].out_channels)
        for i in members:
            _block(old.blocks[i], new.blocks[i], channels, outputs)
            channels = outputs
        index += stage.repeats
    if not isinstance(old.head.conv, nn.Identity):
        head = _top(_importance(old.head.conv), new.head.conv[0].out_channels)
        _conv_bn(old.head.conv, new.head.conv, channels, head)
        channels = head
    first = True
    for old_layer, new_layer in zip(old.head.classifier, new.head.classifier, strict=True):
        if isinstance(old_layer, nn.Linear):
            new_layer.weight.copy_(old_layer.weight[:, channels] if first else old_layer.weight)
            new_layer.bias.copy_(old_layer.bias)
            first = False
