"""Cost profile of any nn.Module: parameters, MACs, FLOPs, activation memory, per-layer table.

Conventions (stated so every number says what it is):
- MACs are multiply-accumulates of convolutions, linear layers and matrix products
  (matmul/einsum/bmm, so attention is counted), the convention of the MobileNet papers.
  BatchNorm, activations, pooling and element-wise ops are not counted.
- FLOPs = 2 x MACs.
- Counts come from torch's FlopCounterMode, which sees the real operator calls of one forward.
- Activation memory is estimated from the tensors the forward produces: inference keeps about
  the largest input + output of one layer alive; training keeps every layer output for backward.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from eas.arch.bounds import check_shape
from eas.arguments import shown, whole
from eas.errors import ArgumentTypeError


@dataclass(frozen=True)
class LayerCost:
    name: str
    kind: str
    output_shape: tuple[int, ...]
    params: int
    macs: int


@dataclass(frozen=True)
class Profile:
    params: int
    trainable_params: int
    macs: int
    input_shape: tuple[int, int, int]
    batch_size: int
    activation_bytes_inference: int
    activation_bytes_training: int
    layers: tuple[LayerCost, ...] = field(default=())

    @property
    def flops(self) -> int:
        """FLOPs = 2 x MACs (one multiply and one add per MAC)."""
        return 2 * self.macs

    @property
    def param_bytes(self) -> int:
        return 4 * self.params

    @property
    def memory_bytes_inference(self) -> int:
        """float32 weights plus the inference activation estimate."""
        return self.param_bytes + self.activation_bytes_inference

    @property
    def memory_bytes_training(self) -> int:
        """Weights, gradients and two AdamW moments (4 copies) plus the kept activations."""
        return 4 * self.param_bytes + self.activation_bytes_training

    def summary(self) -> dict:
        """The scalar numbers, for JSON output."""
        data = {k: v for k, v in asdict(self).items() if k != "layers"}
        data.update(flops=self.flops, memory_bytes_inference=self.memory_bytes_inference,
                    memory_bytes_training=self.memory_bytes_training)
        return data


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def profile(model: nn.Module, input_shape: tuple[int, int, int], batch_size: int = 1) -> Profile:
    """Count the cost of one forward pass of `model` on a (batch_size, *input_shape) input.

    Activation memory is reported for `batch_size`; MACs are per batch of `batch_size` too
    (batch 1 gives the per-sample numbers papers report).
    """
    if not isinstance(model, nn.Module):
        raise ArgumentTypeError(f"eas.profile: model must be a torch.nn.Module (got {shown(model)})")
    input_shape = check_shape(input_shape, "eas.profile: input_shape")
    whole("eas.profile", "batch_size", batch_size, 1, 65536)
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    shapes: dict[str, tuple[int, ...]] = {}
    leaf_io: dict[str, tuple[int, int]] = {}  # leaf module -> (input numel, output numel)
    names = {module: name for name, module in model.named_modules()}

    def record(module, inputs, output):
        if not isinstance(output, torch.Tensor):
            return
        shapes[names[module]] = tuple(output.shape[1:])
        if not list(module.children()):
            in_numel = sum(t.numel() for t in inputs if isinstance(t, torch.Tensor))
            leaf_io[names[module]] = (in_numel, output.numel())

    handles = [m.register_forward_hook(record) for m in model.modules()]
    was_training = model.training
    model.eval()
    counter = FlopCounterMode(display=False)
    try:
        with torch.no_grad(), counter:
            model(torch.zeros(batch_size, *input_shape, device=device))
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)

    flops_by_module = _exclusive_flops(counter.get_flop_counts(), names.values())
    layers = []
    for name, module in model.named_modules():
        own_params = sum(p.numel() for p in module.parameters(recurse=False))
        own_macs = flops_by_module.get(name, 0) // 2
        if own_params or own_macs:
            layers.append(LayerCost(name or "(root)", type(module).__name__,
                                    shapes.get(name, ()), own_params, own_macs))
    bytes_per_value = 4
    peak_inference = max((i + o for i, o in leaf_io.values()), default=0)
    kept_for_backward = sum(o for _, o in leaf_io.values())
    total_flops = sum(counter.get_flop_counts().get("Global", {}).values())
    return Profile(
        params=count_params(model),
        trainable_params=sum(p.numel() for p in model.parameters() if p.requires_grad),
        macs=total_flops // 2,
        input_shape=tuple(input_shape),
        batch_size=batch_size,
        activation_bytes_inference=bytes_per_value * peak_inference,
        activation_bytes_training=bytes_per_value * kept_for_backward,
        layers=tuple(layers),
    )


def _exclusive_flops(counts: dict, module_names) -> dict[str, int]:
    """FlopCounterMode reports totals per module including children, named 'Root.a.b'.

    Subtracting the children's totals leaves what each module computes itself (an einsum
    inside an attention module is attributed to that module).
    """
    inclusive: dict[str, int] = {}
    for key, ops in counts.items():
        if key == "Global":
            continue
        name = key.partition(".")[2]  # drop the root class name
        inclusive[name] = inclusive.get(name, 0) + sum(ops.values())
    exclusive = {}
    known = set(module_names)
    for name, total in inclusive.items():
        if name not in known:
            continue
        prefix = f"{name}." if name else ""
        children = [c for c in inclusive if c.startswith(prefix) and c != name
                    and "." not in c[len(prefix):]]
        exclusive[name] = total - sum(inclusive[c] for c in children)
    return exclusive
