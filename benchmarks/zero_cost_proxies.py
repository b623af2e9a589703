"""Do zero-cost proxies rank our candidates better than counting parameters does?

A zero-cost proxy scores an untrained network in one or two passes. EAS would use one as a
rung -1 (to pick which candidates to train at all) only if, measured on our spaces, it ranks
candidates better than the parameter count, which is free. This trains random candidates of a
space at the full fidelity and reports Kendall's tau between their accuracy and each score:
- params: the parameter count (the baseline);
- NASWOT (Mellor et al. 2021): log-determinant of the kernel of binary activation patterns of
  a mini-batch (how differently the untrained net treats different images);
- synflow (Tanaka et al. 2020): sum of |weight x gradient| of a data-free linearised network.

    python benchmarks/zero_cost_proxies.py [--space tiny] [--candidates 16] [--epochs 1 --subset 9000]
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

ACTIVATIONS = (nn.ReLU, nn.ReLU6, nn.Hardswish, nn.GELU, nn.SiLU)


def naswot(model: nn.Module, x: torch.Tensor) -> float:
    codes = []
    hooks = [m.register_forward_hook(lambda m, i, o: codes.append((i[0] > 0).flatten(1).float()))
             for m in model.modules() if isinstance(m, ACTIVATIONS)]
    model.train()
    with torch.no_grad():
        model(x)
    for hook in hooks:
        hook.remove()
    c = torch.cat(codes, 1).double()
    kernel = c @ c.T + (1 - c) @ (1 - c).T
    return float(torch.linalg.slogdet(kernel)[1])


def synflow(model: nn.Module, shape) -> float:
    model = model.double().eval()
    signs = {}
    with torch.no_grad():
        for name, p in model.state_dict().items():
            signs[name] = torch.sign(p)
            p.abs_()
    model.zero_grad()
    model(torch.ones(1, *shape, dtype=torch.double)).sum().backward()
    score = sum(float((p * p.grad).abs().sum()) for p in model.parameters() if p.grad is not None)
    return score


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--space", default="tiny")
    parser.add_argument("--data", default="fashion-mnist")
    parser.add_argument("--candidates", type=int, default=16)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--subset", type=int, default=9000)
    args = parser.parse_args()

    import optuna
    from scipy.stats import kendalltau

    from eas.arch.builder import build
    from eas.arch.space import load_space
    from eas.data.datasets import load_dataset
    from eas.nas.candidate import evaluate
    from eas.training.proxy import Fidelity
    from eas.units import table

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    task = load_dataset(args.data)
    space = load_space(args.space, task.input_shape)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=7))
    archs = [space.sample(study.ask()) for _ in range(args.candidates)]
    fidelity = Fidelity(epochs=args.epochs, subset=args.subset)
    batch = task.train_x[:64].contiguous(memory_format=torch.channels_last)
    scores = {"params": [], "NASWOT": [], "synflow": []}
    accuracies = []
    for arch in archs:
        torch.manual_seed(0)
        model = build(arch, task.input_shape, task.num_classes).to(memory_format=torch.channels_last)
        scores["params"].append(sum(p.numel() for p in model.parameters()))
        scores["NASWOT"].append(naswot(model, batch))
        torch.manual_seed(0)
        scores["synflow"].append(synflow(build(arch, task.input_shape, task.num_classes), task.input_shape))
        accuracies.append(evaluate(arch, task, fidelity, device="cpu").accuracy)
        print(f"  {len(accuracies)}/{len(archs)}: accuracy {accuracies[-1]:.2%}", flush=True)
    rows = []
    for name, values in scores.items():
        tau = kendalltau(values, accuracies).statistic
        rows.append([name, f"{tau:+.2f}", f"{tau / kendalltau(scores['params'], accuracies).statistic:.2f}x"
                     if name != "params" else "1.00x (baseline)"])
    print(f"\n{args.candidates} random candidates of space {args.space} on {args.data}, trained "
          f"{fidelity.total_steps(len(task.train_y))} steps each (accuracies {min(accuracies):.1%}-"
          f"{max(accuracies):.1%}): Kendall tau between score and accuracy\n")
    print(table(rows, ["score", "Kendall tau", "vs params"]))
    print("\nA proxy earns a rung -1 only if its tau is clearly above the parameter count's.")


if __name__ == "__main__":
    main()
