"""A kill at any instant of a checkpoint save leaves a resumable run (fault injection at every
file operation of the save), and an unreadable checkpoint is a clear error."""

import os
import shutil

import pytest
import torch

from eas.errors import UserError
from eas.training import checkpoint as ckpt
from eas.training.step import warmup_cosine


def parts():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    return model, optimizer, warmup_cosine(optimizer, 10)


class Killed(Exception):
    pass


def operations_of_a_save(tmp_path) -> int:
    """How many file operations (renames and removals) a save over an existing checkpoint makes."""
    calls = []
    real_replace, real_rmtree = os.replace, shutil.rmtree
    ckpt.save_checkpoint(tmp_path / "probe", *parts(), {"step": 0, "plan": {}})
    ckpt.os.replace = lambda *a: (calls.append("replace"), real_replace(*a))[1]
    ckpt.shutil.rmtree = lambda *a, **k: (calls.append("rmtree"), real_rmtree(*a, **k))[1]
    try:
        ckpt.save_checkpoint(tmp_path / "probe", *parts(), {"step": 1, "plan": {}})
    finally:
        ckpt.os.replace, ckpt.shutil.rmtree = real_replace, real_rmtree
    return len(calls)


def test_a_kill_at_any_step_of_a_save_leaves_a_resumable_checkpoint(tmp_path, monkeypatch):
    total = operations_of_a_save(tmp_path)
    assert total >= 4
    for kill_at in range(total):
        folder = tmp_path / f"run{kill_at}" / "checkpoint"
        folder.parent.mkdir()
        ckpt.save_checkpoint(folder, *parts(), {"step": 1, "plan": {}})
        real_replace, real_rmtree = os.replace, shutil.rmtree

        def dying(real, count=[0], kill_at=kill_at):  # noqa: B006  (shared by both patched operations)
            def operation(*args, **kwargs):
                if count[0] == kill_at:
                    raise Killed()
                count[0] += 1
                return real(*args, **kwargs)
            return operation

        monkeypatch.setattr(ckpt.os, "replace", dying(real_replace))
        monkeypatch.setattr(ckpt.shutil, "rmtree", dying(real_rmtree))
        with pytest.raises(Killed):
            ckpt.save_checkpoint(folder, *parts(), {"step": 2, "plan": {}})
        monkeypatch.setattr(ckpt.os, "replace", real_replace)
        monkeypatch.setattr(ckpt.shutil, "rmtree", real_rmtree)

        assert ckpt.recover_checkpoint(folder), f"no checkpoint after a kill at operation {kill_at}"
        progress = ckpt.load_checkpoint(folder, *parts())
        assert progress["step"] in (1, 2)
        ckpt.save_checkpoint(folder, *parts(), {"step": 3, "plan": {}})  # the run goes on
        assert ckpt.load_checkpoint(folder, *parts())["step"] == 3
        assert sorted(p.name for p in folder.parent.iterdir()) == ["checkpoint"]


def test_a_corrupt_checkpoint_says_restart(tmp_path):
    folder = tmp_path / "checkpoint"
    ckpt.save_checkpoint(folder, *parts(), {"step": 1, "plan": {}})
    (folder / "model.safetensors").write_bytes(b"\x00" * 40)
    with pytest.raises(UserError, match="--restart"):
        ckpt.load_checkpoint(folder, *parts())
    (folder / "state.json").write_text("{not json")
    with pytest.raises(UserError, match="--restart"):
        ckpt.load_checkpoint(folder, *parts())


def test_weights_are_written_whole(tmp_path):
    model, _, _ = parts()
    ckpt.save_weights(tmp_path / "best.safetensors", model)
    assert [p.name for p in tmp_path.iterdir()] == ["best.safetensors"]
