"""Training checkpoints without pickle: tensors in safetensors files, the rest in JSON.

A checkpoint folder holds model.safetensors, optimizer.safetensors (the optimiser's per-
parameter tensors and the RNG states), and state.json (optimiser hyper-parameters and scalars,
scheduler state, epoch, step, metrics so far).

A kill at any instant leaves a resumable run. A new checkpoint is written whole into
`checkpoint.partial`; then the current one is renamed `checkpoint.old`, the partial one
becomes `checkpoint`, and the old one is removed. Whatever step a kill interrupts, either
`checkpoint` or `checkpoint.old` is complete, and `recover_checkpoint` puts it back in place.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from eas.errors import UserError
from eas.jsonfile import read_json


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


def _sibling(folder: Path, suffix: str) -> Path:
    return folder.with_name(folder.name + suffix)


def recover_checkpoint(folder: Path) -> bool:
    """Finish or undo a save that a kill interrupted; True when a complete checkpoint is in place."""
    folder = Path(folder)
    old, partial = _sibling(folder, ".old"), _sibling(folder, ".partial")
    if not folder.exists() and old.exists():
        os.replace(old, folder)  # killed between the two renames: the old one is complete
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(partial, ignore_errors=True)  # never renamed into place: maybe incomplete
    return folder.exists()


def save_checkpoint(folder: Path, model, optimizer, scheduler, progress: dict,
                    average: dict[str, torch.Tensor] | None = None) -> None:
    """Everything a restart resumes from; `average`: the weights' moving average, if any."""
    folder = Path(folder)
    partial, old = _sibling(folder, ".partial"), _sibling(folder, ".old")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    weights = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    save_file(weights, str(partial / "model.safetensors"))
    tensors, meta = _split_optimizer(optimizer.state_dict())
    tensors.update({f"average.{k}": v.detach().cpu().contiguous() for k, v in (average or {}).items()})
    tensors["rng.torch"] = torch.get_rng_state()
    if torch.cuda.is_available():
        for index, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{index}"] = state
    save_file(tensors, str(partial / "optimizer.safetensors"))
    state = {"optimizer": meta, "scheduler": scheduler.state_dict(), "progress": progress}
    (partial / "state.json").write_text(json.dumps(state, default=float))
    if folder.exists():
        shutil.rmtree(old, ignore_errors=True)  # a leftover from an earlier kill
        os.replace(folder, old)
    os.replace(partial, folder)
    shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(folder: Path, model, optimizer, scheduler, average: dict[str, torch.Tensor] | None = None) -> dict:
    """Restore model, optimiser, scheduler, RNG states and the weights' moving average (into
    `average`'s tensors) in place; returns the saved progress."""
    folder = Path(folder)
    try:
        state = read_json(folder / "state.json")
        model.load_state_dict(load_file(str(folder / "model.safetensors")))
        tensors = load_file(str(folder / "optimizer.safetensors"))
        names = [k for k in tensors if k.startswith("average.")]
        averaged = {k.removeprefix("average."): tensors.pop(k) for k in names}
        if average is not None:
            if averaged.keys() != average.keys():
                raise KeyError("the weights' moving average")
            for name, tensor in average.items():
                tensor.copy_(averaged[name])
        cpu_state = tensors.pop("rng.torch")
        cuda_states = [tensors.pop(k) for k in sorted((k for k in list(tensors) if k.startswith("rng.cuda.")),
                                                      key=lambda k: int(k.rsplit(".", 1)[1]))]
        optimizer.load_state_dict(_join_optimizer(tensors, state["optimizer"]))
        scheduler.load_state_dict(state["scheduler"])
        progress = state["progress"]
        if not isinstance(progress, dict) or not isinstance(progress.get("plan"), dict):
            raise TypeError("progress without its plan")  # a run without its plan cannot be resumed
        torch.set_rng_state(cpu_state)
        if cuda_states and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(cuda_states[:torch.cuda.device_count()])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, RuntimeError,
            SafetensorError) as error:
        raise UserError(f"checkpoint {folder} is unreadable ({type(error).__name__}); "
                        "run again with --restart to start over") from None
    return progress


def save_weights(path: Path, model) -> None:
    """Model weights, written to a temporary file and renamed: never half a file."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, str(partial))
    os.replace(partial, path)


def load_weights(path: Path, model):
    """Weights written by save_weights, into `model`; returns the model. A file that is missing,
    garbled, a pickle, or of another architecture is one clear error."""
    try:
        model.load_state_dict(load_file(str(path)))
    except (OSError, ValueError, RuntimeError, SafetensorError) as error:
        raise UserError(f"{path} does not hold this architecture's weights "
                        f"({(str(error).strip().splitlines() or [type(error).__name__])[0][:200]})") from None
    return model
