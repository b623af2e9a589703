"""`eas supernet train`: train every sub-network of a space at once, resumable after kill -9.

Each step follows the sandwich rule (BigNAS, Once-for-All): the largest sub-network learns from
the labels; the smallest and `random_subnets` random ones learn from the labels and from the
largest's outputs of that same step (in-place distillation: cross-entropy plus the KL divergence
to its softmax, mixed as Once-for-All mixes them; distillation alone learnt too slowly from the
early, weak teacher: 39% on training batches after 60 digits steps, 94% with the labels after
300), their gradients summed into the shared tensors before one optimiser step. Hidden channels are sorted by importance
every `sort_steps` steps (eas.arch.elastic.sort_channels), with the optimiser's moments.

The plan's step count is fixed once (from --steps, or from --budget and the first steps' pace),
stored in every checkpoint, and each step's data and sub-networks follow from (seed, step), so a
resumed run takes the steps an uninterrupted one would have taken.
"""

from __future__ import annotations

import logging
import math
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn
from torch.func import functional_call

from eas import interrupt
from eas.arch.elastic import Supernet, sort_channels
from eas.errors import UserError
from eas.jsonfile import read_json
from eas.measure.device import device_label
from eas.measure.energy import make_meter
from eas.training.checkpoint import load_checkpoint, recover_checkpoint, save_checkpoint
from eas.training.step import MIN_BATCH, resolve_precision, warmup_cosine
from eas.training.supernet_file import DESCRIPTION, save_supernet

logger = logging.getLogger(__name__)

PACE_STEPS = 3  # steps timed to turn a --budget into a step count


@dataclass(frozen=True)
class SupernetPlan:
    steps: int | None = None  # None: as many as `budget_seconds` allows at the first steps' pace
    budget_seconds: float | None = None
    batch_size: int = 128
    lr: float = 3e-3
    weight_decay: float = 0.01
    random_subnets: int = 2
    sort_steps: int = 200
    checkpoint_steps: int = 100
    checkpoint_minutes: float = 5.0
    precision: str = "auto"
    seed: int = 0

    # What changes the trained weights: a checkpoint made with other values is not resumed.
    MUST_MATCH = ("batch_size", "lr", "weight_decay", "random_subnets", "sort_steps", "precision", "seed")

    def __post_init__(self) -> None:
        if self.steps is None and not self.budget_seconds:
            raise UserError("give --budget or --steps: how long to train the supernet")
        if self.steps is not None and self.steps < 1:
            raise UserError(f"--steps must be at least 1 (got {self.steps})")
        if self.batch_size < MIN_BATCH:
            raise UserError(f"--batch-size must be at least {MIN_BATCH} (got {self.batch_size})")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise UserError(f"--lr must be a positive number (got {self.lr})")
        if not 0 <= self.random_subnets <= 16:
            raise UserError(f"--random-subnets must be 0..16 (got {self.random_subnets})")

    def recipe(self) -> dict:
        """What the description file says about how the weights were made."""
        return {**{k: getattr(self, k) for k in self.MUST_MATCH}, "optimizer": "adamw", "schedule": "warmup-cosine",
                "sandwich": f"largest + smallest + {self.random_subnets} random per step",
                "distillation": "labels + in-place from the largest (KL to its softmax, T=1)",
                "channel_order": f"hidden channels sorted by L1 importance every {self.sort_steps} steps",
                "weight_sharing": "first blocks of each stage, first channels, centre of each kernel"}


@dataclass
class SupernetProgress:
    plan: dict
    total_steps: int
    step: int = 0
    images: int = 0
    seconds: float = 0.0
    energy_j: float = 0.0
    history: list = field(default_factory=list)  # {"step", "loss_largest", "loss_smallest"} now and then


def _saved_total_steps(checkpoint: Path) -> int:
    """The step count a checkpoint's plan fixed (the schedule must exist before it is loaded)."""
    try:
        total = read_json(checkpoint / "state.json")["progress"]["total_steps"]
        if not isinstance(total, int) or isinstance(total, bool) or total < 1:
            raise TypeError("total_steps")
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UserError(f"checkpoint {checkpoint} is unreadable ({type(error).__name__}); run again with "
                        "--restart to start over") from None
    return total


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def soft_loss(logits: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """KL divergence from the teacher's distribution (in-place distillation, temperature 1)."""
    return nn.functional.kl_div(nn.functional.log_softmax(logits.float(), 1), nn.functional.log_softmax(
        teacher.float(), 1), log_target=True, reduction="batchmean")


class SupernetTraining:
    """One `eas supernet train` run: fresh, or resumed from `folder/checkpoint`."""

    def __init__(self, folder: Path, task, space, data: str, plan: SupernetPlan, device: torch.device,
                 meter_name: str, restart: bool, show_progress: bool):
        self.folder, self.task, self.data, self.plan, self.device = Path(folder), task, data, plan, device
        self.show_progress = show_progress
        if self.folder.exists() and not self.folder.is_dir():
            raise UserError(f"--out {self.folder} is a file: name a folder for the supernet")
        if (self.folder / DESCRIPTION).exists() and not restart:
            raise UserError(f"{self.folder} already holds a trained supernet; use another --out, or --restart to "
                            "train it again")
        torch.manual_seed(plan.seed)
        self.supernet = Supernet(space, task.input_shape, task.num_classes).to(device)
        self.precision = resolve_precision(plan.precision, device)
        self.autocast = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision)
        self.optimizer = torch.optim.AdamW(self.supernet.parameters(), lr=plan.lr, weight_decay=plan.weight_decay)
        self.meter, self.energy_note = make_meter(meter_name, cuda=device.type == "cuda")
        self.checkpoint = self.folder / "checkpoint"
        self.train_x, self.train_y = task.train_x.to(device), task.train_y.to(device)
        self.scheduler, self.progress = self._resume_or_start(restart)
        self.saved_step = self.progress.step  # what a kill now would resume from
        # Called after every step with the progress (e.g. to evaluate sub-networks as training goes);
        # its time and energy are not counted as the supernet's training.
        self.after_step: Callable[[SupernetProgress], None] | None = None

    # -- plan, checkpoint --------------------------------------------------------------
    def _resume_or_start(self, restart: bool):
        if not restart and recover_checkpoint(self.checkpoint):
            total = _saved_total_steps(self.checkpoint)
            scheduler = warmup_cosine(self.optimizer, total)
            saved = load_checkpoint(self.checkpoint, self.supernet, self.optimizer, scheduler)
            different = [k for k in SupernetPlan.MUST_MATCH if saved["plan"].get(k) != getattr(self.plan, k)]
            if different or saved.get("data") != self.data:
                what = ", ".join(different) if different else f"data ({saved.get('data')})"
                raise UserError(f"{self.checkpoint} was made with different {what}; use the same settings to "
                                "resume, or --restart to start over")
            try:
                progress = SupernetProgress(**{k: v for k, v in saved.items() if k != "data"})
            except TypeError:
                raise UserError(f"checkpoint {self.checkpoint} is unreadable (progress); run again with --restart "
                                "to start over") from None
            return scheduler, progress
        total = self.plan.steps or self._steps_for_budget()
        return warmup_cosine(self.optimizer, total), SupernetProgress(plan=asdict(self.plan), total_steps=total)

    def _steps_for_budget(self) -> int:
        """Steps that fit the budget at the pace of a few sandwich steps (which train nothing:
        the weights and optimiser are put back)."""
        weights = {k: v.clone() for k, v in self.supernet.state_dict().items()}
        self._sandwich(0)  # the first step is slower (allocation): not timed
        started = time.perf_counter()
        for step in range(1, PACE_STEPS + 1):
            self._sandwich(step)
        pace = (time.perf_counter() - started) / PACE_STEPS
        self.supernet.load_state_dict(weights)
        self.optimizer = torch.optim.AdamW(self.supernet.parameters(), lr=self.plan.lr,
                                           weight_decay=self.plan.weight_decay)
        return max(1, int(self.plan.budget_seconds / pace))

    def _save_checkpoint(self) -> None:
        save_checkpoint(self.checkpoint, self.supernet, self.optimizer, self.scheduler,
                        {**asdict(self.progress), "data": self.data})

    # -- training ----------------------------------------------------------------------
    def _batch(self, step: int):
        """The step's images: epoch e's order is a permutation seeded by (seed, e)."""
        n, size = len(self.train_y), self.plan.batch_size
        per_epoch = max(1, n // size)
        epoch, position = divmod(step, per_epoch)
        order = torch.randperm(n, generator=torch.Generator().manual_seed(self.plan.seed * 1009 + epoch))
        index = order[position * size:(position + 1) * size].to(self.device)
        return self.train_x[index].contiguous(memory_format=torch.channels_last), self.train_y[index]

    def _forward(self, params: dict, x: torch.Tensor) -> torch.Tensor:
        arch = self.supernet.space.arch_from_params(params)
        skeleton = self.supernet.skeleton(arch).train()
        with torch.autocast(self.device.type, dtype=self.autocast, enabled=self.autocast is not None):
            return functional_call(skeleton, self.supernet.tensors_for(arch, skeleton), (x,))

    def _sandwich(self, step: int) -> tuple[float, float]:
        """One optimiser step; returns (largest's loss, smallest's loss)."""
        rng = random.Random(self.plan.seed * 1_000_003 + step)
        x, y = self._batch(step)
        self.optimizer.zero_grad(set_to_none=True)
        logits = self._forward(self.supernet.sample_params(rng, "largest"), x)
        loss = nn.functional.cross_entropy(logits.float(), y)
        loss.backward()
        teacher = logits.detach()
        losses = [loss.item()]
        for which in ["smallest"] + ["random"] * self.plan.random_subnets:
            logits = self._forward(self.supernet.sample_params(rng, which), x)
            child = nn.functional.cross_entropy(logits.float(), y) + soft_loss(logits, teacher)
            child.backward()
            losses.append(child.item())
        self.optimizer.step()
        return losses[0], losses[1]

    def run(self) -> dict:
        """Train to the plan's last step, checkpointing; then write the supernet. Its description."""
        progress, plan = self.progress, self.plan
        if progress.step:
            self._say(f"resuming at step {progress.step} of {progress.total_steps}")
        else:
            self._say(f"training the supernet of space {self.supernet.space.name!r}: {progress.total_steps} steps "
                      f"of {plan.batch_size} images, {2 + plan.random_subnets} sub-networks each")
        token, started, last_save = self.meter.start(), time.perf_counter(), time.monotonic()
        report_every = max(1, progress.total_steps // 10)
        first_step, run_started = progress.step, time.monotonic()

        def bank() -> None:
            nonlocal token, started
            progress.energy_j += self.meter.stop(token).joules
            progress.seconds += time.perf_counter() - started
            token, started = self.meter.start(), time.perf_counter()

        while progress.step < progress.total_steps:
            interrupt.check()
            largest, smallest = self._sandwich(progress.step)
            if not math.isfinite(largest):
                raise UserError(f"supernet training diverged at step {progress.step + 1} (loss {largest}); try a "
                                "lower --lr")
            self.scheduler.step()
            progress.step += 1
            progress.images += plan.batch_size
            if self.after_step is not None:
                bank()
                self.after_step(progress)
                token, started = self.meter.start(), time.perf_counter()
            if progress.step % report_every == 0 or progress.step == progress.total_steps:
                progress.history.append({"step": progress.step, "loss_largest": round(largest, 4),
                                         "loss_smallest": round(smallest, 4)})
                pace = (time.monotonic() - run_started) / (progress.step - first_step)
                self._say(f"step {progress.step}/{progress.total_steps}: loss largest {largest:.3f}, smallest "
                          f"{smallest:.3f} (labels + distillation); about "
                          f"{_minutes(pace * (progress.total_steps - progress.step))} left")
            if progress.step % plan.sort_steps == 0 and progress.step < progress.total_steps:
                sort_channels(self.supernet, self.optimizer.state)
            late = time.monotonic() - last_save > 60 * plan.checkpoint_minutes
            if progress.step % plan.checkpoint_steps == 0 or late:
                bank()
                with interrupt.deferred():  # the step saved is the step reported saved
                    self._save_checkpoint()
                    self.saved_step, last_save = progress.step, time.monotonic()
        bank()
        description = save_supernet(self.folder, self.supernet, self._description())
        self._remove_checkpoint()
        return description

    def _description(self) -> dict:
        p, space = self.progress, self.supernet.space
        return {"space_name": space.name, "space": space.definition, "data": self.data,
                "input_shape": list(self.task.input_shape), "num_classes": self.task.num_classes,
                "classes": list(self.task.classes), "recipe": self.plan.recipe(),
                "trained": {"steps": p.step, "images": p.images, "seconds": round(p.seconds, 2),
                            "energy_j": round(p.energy_j, 2), "energy_source": self.meter.source,
                            "energy_note": self.energy_note, "device": device_label(self.device),
                            "precision": self.precision, "history": p.history},
                "parameters": sum(t.numel() for t in self.supernet.parameters())}

    def _remove_checkpoint(self) -> None:
        shutil.rmtree(self.checkpoint, ignore_errors=True)

    def _say(self, line: str) -> None:
        if self.show_progress:
            logger.info(line)
