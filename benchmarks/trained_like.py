"""A random network of a space made to look trained, for benchmarks that convert networks.

BatchNorm as after training: scales and shifts of its own, statistics of the inputs. With the
initial ones (identity, mean 0, variance 1) converters drop a pre-norm BatchNorm that a trained
one keeps, and activations span ranges whose int8 scales overflow a runtime's checks (TensorFlow
Lite Micro's "no_integer_overflow_from_quantization"), neither of them a trained network's.
"""

from __future__ import annotations


def trained_like(genome: str, shape: tuple, classes: int, rng):
    """`genome`'s network (eval mode) with trained-like BatchNorms drawn from `rng` (a numpy
    Generator, which the caller may go on drawing from); torch imported on call."""
    import numpy as np
    import torch

    from eas.arch.builder import build

    model = build(genome, shape, classes)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.weight.copy_(torch.from_numpy(rng.uniform(0.5, 1.5, module.num_features)))
                module.bias.copy_(torch.from_numpy(rng.normal(0.0, 0.1, module.num_features)))
        model.train()
        for _ in range(4):
            model(torch.from_numpy(rng.random((32, *shape), dtype=np.float32)))
    return model.eval()


def random_arch(space, rng, activations: list[str] | None = None):
    """One architecture drawn from `space` by `rng` (a random.Random), each choice uniform; with
    `activations`, the `.act` choices are kept to those."""
    choices = {k: [c for c in v if not k.endswith(".act") or activations is None or c in activations]
               for k, v in space.parameters().items()}
    return space.arch_from_params({k: rng.choice(v) for k, v in choices.items() if v})
