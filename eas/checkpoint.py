"""Training checkpoints without pickle: tensors in safetensors files, the rest in JSON.

A checkpoint folder holds model.safetensors, optimizer.safetensors (the optimiser's per-
parameter tensors), and state.json (optimiser hyper-parameters and scalars, scheduler state,
epoch, step, metrics so far). The torch RNG state is a tensor too. Folders are written to a
temporary name and renamed, so a kill -9 never leaves half a checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def _split_optimizer(state: dict) -> tuple[dict[str, torch.Tensor], dict]:
    tensors, scalars = {}, {}
    for param_id, values in state["state"].items():
        for key, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{param_id}.{key}"] = value.detach().cpu().contiguous()
            else:
                scalars[f"{param_id}.{key}"] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def _join_optimizer(tensors: dict[str, torch.Tensor], meta: dict) -> dict:
    state: dict[int, dict] = {}
    for name, value in list(tensors.items()) + list(meta["scalars"].items()):
        param_id, key = name.split(".", 1)
        state.setdefault(int(param_id), {})[key] = value
    return {"state": state, "param_groups": meta["param_groups"]}


def save_checkpoint(folder: Path, model, optimizer, scheduler, progress: dict) -> None:
    folder = Path(folder)
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    weights = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    save_file(weights, str(partial / "model.safetensors"))
    tensors, meta = _split_optimizer(optimizer.state_dict())
    tensors["rng.torch"] = torch.get_rng_state()
    save_file(tensors, str(partial / "optimizer.safetensors"))
    state = {"optimizer": meta, "scheduler": scheduler.state_dict(), "progress": progress}
    (partial / "state.json").write_text(json.dumps(state, default=float))
    old = folder.with_name(folder.name + ".old")
    if folder.exists():
        os.replace(folder, old)
    os.replace(partial, folder)
    shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(folder: Path, model, optimizer, scheduler) -> dict:
    """Restore model, optimiser, scheduler and RNG in place; returns the saved progress."""
    folder = Path(folder)
    model.load_state_dict(load_file(str(folder / "model.safetensors")))
    tensors = load_file(str(folder / "optimizer.safetensors"))
    torch.set_rng_state(tensors.pop("rng.torch"))
    state = json.loads((folder / "state.json").read_text())
    optimizer.load_state_dict(_join_optimizer(tensors, state["optimizer"]))
    scheduler.load_state_dict(state["scheduler"])
    return state["progress"]


def save_weights(path: Path, model) -> None:
    save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, str(path))
