"""`eas train DIR`: train an exported architecture fully, resumable after kill -9.

Checkpoints (model, optimiser, scheduler, RNG, epoch, step, energy so far) every N steps or
minutes and at each epoch end. Data order comes from a generator seeded by (seed, epoch) and
the RNG state is restored, so a resumed run takes the same steps as an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

from eas import interrupt
from eas.arch.bounds import check_buildable, check_classes, check_shape
from eas.arch.builder import build
from eas.arch.genome import Arch
from eas.arch.profile import profile
from eas.arch.space import TRAIN_FIELDS
from eas.errors import UserError
from eas.jsonfile import read_json
from eas.measure.device import resolve_device
from eas.measure.energy import make_meter
from eas.training.checkpoint import load_checkpoint, load_weights, recover_checkpoint, save_checkpoint, save_weights
from eas.training.distributed import Group, energy_share
from eas.training.green import DEFAULT_GRID_G_PER_KWH, efficiency_report
from eas.training.proxy import Fidelity
from eas.training.recipe import Recipe, WeightAverage, augment_batch, batch_generator
from eas.training.step import (
    MIN_BATCH,
    DistillationLoss,
    TrainStep,
    evaluate_accuracy,
    recalibrate_batchnorm,
    resolve_precision,
    warmup_cosine,
)
from eas.units import format_duration

logger = logging.getLogger(__name__)

LOG_SECONDS = 60.0  # in a log, a progress line this often while an epoch runs
WEIGHTS = "model.safetensors"  # what `eas train` leaves: the weights of the best epoch
WRITTEN = ("checkpoint", "best.safetensors", WEIGHTS, "report.json")  # what it writes in the export


@dataclass(frozen=True)
class TrainPlan:
    epochs: int = 10
    batch_size: int = 128
    accumulate: int = 1  # micro-batches per optimiser step (the batch is split, not enlarged)
    lr: float = 3e-3
    weight_decay: float = 0.05
    precision: str = "auto"
    patience: int | None = None  # early stopping: epochs without a better validation accuracy
    target: float | None = None  # report the time to reach this validation accuracy
    checkpoint_steps: int = 200
    checkpoint_minutes: float = 5.0
    seed: int = 0
    teacher: str | None = None  # a trained export to distil from
    augment: str = "none"  # the recipe (eas.training.recipe): none | shift | standard
    label_smoothing: float = 0.0
    ema: float = 0.0  # decay of the weights' moving average; 0: off

    # Settings that change the result: a checkpoint made with others cannot be resumed.
    MUST_MATCH = ("epochs", "batch_size", "accumulate", "lr", "weight_decay", "precision", "seed", "teacher",
                  "augment", "label_smoothing", "ema")

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.accumulate < 1:
            raise UserError("epochs and accumulation steps must be at least 1")
        Fidelity(epochs=self.epochs, batch_size=self.batch_size, lr=self.lr, weight_decay=self.weight_decay,
                 precision=self.precision)  # the same checks as a proxy fidelity
        if self.batch_size % self.accumulate or self.batch_size // self.accumulate < MIN_BATCH:
            raise UserError(f"--batch-size {self.batch_size} must split into --accumulate {self.accumulate} "
                            f"micro-batches of at least {MIN_BATCH} images each")
        if self.seed < 0:
            raise UserError(f"--seed must be at least 0 (got {self.seed})")
        Recipe.parse(self.augment, self.label_smoothing, self.ema, "npz")  # the recipe's own checks

    @property
    def recipe(self) -> Recipe:
        return Recipe(self.augment, self.label_smoothing, self.ema)


def read_arch(folder: Path) -> dict:
    """arch.json of an export, checked: a genome that decodes, a sane shape and class count."""
    path = Path(folder) / "arch.json"
    if not path.exists():
        raise UserError(f"{folder} holds no arch.json (make one with `eas export`)")
    if not path.is_file():
        raise UserError(f"{path} is not a file")
    try:
        document = read_json(path)
        if not isinstance(document, dict):
            raise TypeError(f"a {type(document).__name__}, not a mapping")
        genome, task = document["genome"], document["task"]
        shape = check_shape(task["input_shape"], f"{path}: input_shape")
        classes = check_classes(task["num_classes"], f"{path}: num_classes")
        check_buildable(Arch.decode(genome), shape, classes)
        _check_training(document.get("training") or {})
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror}") from None
    except UserError as error:  # before ValueError, which it is
        raise UserError(f"{path}: {error}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise UserError(f"{path} is not an EAS architecture file ({type(error).__name__}: {error})") from None
    return document


def _check_training(training: dict) -> None:
    if not isinstance(training, dict):
        raise UserError(f"training: expected a mapping of lr, weight_decay, batch_size (got {str(training)[:40]})")
    for key, value in training.items():
        if key not in TRAIN_FIELDS or not TRAIN_FIELDS[key][0](value):
            raise UserError(f"training.{key}: {value!r} is not {TRAIN_FIELDS.get(key, (0, 'known'))[1]}")


def load_trained(folder: Path, task):
    """(arch.json, the trained fp32 model in eval mode) of an export that `eas train` trained."""
    document = read_arch(folder)
    check_task_fits(document, task)
    weights = Path(folder) / WEIGHTS
    if not weights.is_file():
        raise UserError(f"{folder} holds no trained weights ({WEIGHTS}); train it first: eas train {folder}")
    model = build(document["genome"], task.input_shape, task.num_classes)
    load_weights(weights, model)
    return document, model.eval()


def check_teacher(student: dict, teacher_folder: Path) -> dict:
    """The teacher's arch.json, refused unless it sees the same input and predicts the same classes."""
    teacher = read_arch(teacher_folder)
    for key, what in (("input_shape", "input shape"), ("num_classes", "number of classes")):
        if teacher["task"][key] != student["task"][key]:
            raise UserError(f"teacher {teacher_folder} has {what} {teacher['task'][key]}; the student has "
                            f"{student['task'][key]}")
    if not (Path(teacher_folder) / WEIGHTS).is_file():
        raise UserError(f"teacher {teacher_folder} holds no trained weights ({WEIGHTS}); train it first")
    return teacher


def check_task_fits(document: dict, task) -> None:
    """The data must be what the architecture was searched for: the same input shape and classes."""
    want_shape = tuple(document["task"]["input_shape"])
    want_classes = int(document["task"]["num_classes"])
    if tuple(task.input_shape) != want_shape:
        shown = "x".join(map(str, want_shape))
        raise UserError(f"data {task.name} has input {'x'.join(map(str, task.input_shape))} (channels x height x "
                        f"width); the architecture was searched for {shown}")
    if task.num_classes != want_classes:
        raise UserError(f"data {task.name} has {task.num_classes} classes; the architecture expects {want_classes}")


PROGRESS_TYPES = {"plan": dict, "epoch": int, "step": int, "global_step": int, "energy_j": (int, float),
                  "train_seconds": (int, float), "best_accuracy": (int, float), "best_epoch": (int, type(None)),
                  "bad_epochs": int, "time_to_target_s": (int, float, type(None)), "history": list, "done": bool,
                  "data": (str, type(None))}


@dataclass
class Progress:
    """Where a full training stands; saved in every checkpoint, so that a restart resumes here."""

    plan: dict
    epoch: int = 0
    step: int = 0  # within the epoch
    global_step: int = 0
    energy_j: float = 0.0
    train_seconds: float = 0.0
    best_accuracy: float = -1.0
    best_epoch: int | None = None
    bad_epochs: int = 0
    time_to_target_s: float | None = None
    history: list = field(default_factory=list)
    done: bool = False  # stopped early
    data: str | None = None  # the dataset it trains on: a checkpoint of other data is not resumed

    @classmethod
    def from_checkpoint(cls, saved: dict, checkpoint: Path) -> Progress:
        """The progress a checkpoint saved, each field of its type (the file is input too)."""
        known = {f.name for f in fields(cls)}
        progress = cls(**{k: v for k, v in saved.items() if k in known})
        wrong = [name for name, kinds in PROGRESS_TYPES.items() if not isinstance(getattr(progress, name), kinds)
                 or (isinstance(getattr(progress, name), bool) and name != "done")]
        if wrong:
            raise UserError(f"checkpoint {checkpoint} is unreadable (progress: {', '.join(wrong)}); run again "
                            "with --restart to start over")
        return progress


class EnergyClock:
    """The meter's running window, banked into the progress at every checkpoint and epoch end
    (so that energy and time survive a restart); summed over a distributed group's workers."""

    def __init__(self, meter, group):
        self.meter, self.group = meter, group
        self.token, self.started = meter.start(), time.perf_counter()

    def bank(self, progress: Progress) -> None:
        reading = self.meter.stop(self.token)
        progress.energy_j += self.group.total(energy_share(reading.joules, reading.source, self.group))
        progress.train_seconds += time.perf_counter() - self.started
        self.token, self.started = self.meter.start(), time.perf_counter()


class FullTraining:
    """One run of `eas train` on an export: set up (or resumed from its checkpoint), then epochs
    of steps, each epoch validated; worker 0 of a distributed group writes everything."""

    def __init__(self, folder: Path, task, plan: TrainPlan, device_name: str, meter_name: str, restart: bool,
                 start_from: Path | None, distributed: bool):
        self.folder, self.task, self.plan = Path(folder), task, plan
        self.document = read_arch(self.folder)
        for target in (self.folder, *(self.folder / name for name in WRITTEN)):
            if target.exists() and not os.access(target, os.W_OK):
                raise UserError(f"cannot write {target}: it is read-only (the export is left as it is)")
        check_task_fits(self.document, task)
        device = resolve_device(device_name)
        self.group = Group.from_environment(device.type == "cuda") if distributed else Group()
        if device.type == "cuda" and distributed:
            device = torch.device("cuda", self.group.local_rank)
            torch.cuda.set_device(device)
        self.device = device
        self.meter, _ = make_meter(meter_name, cuda=device.type == "cuda")
        self.precision = resolve_precision(plan.precision, device)
        torch.manual_seed(plan.seed)
        self.model = build(self.document["genome"], task.input_shape, task.num_classes).to(device)
        self.model = self.model.to(memory_format=torch.channels_last)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=plan.lr, weight_decay=plan.weight_decay)
        self.steps_per_epoch = math.ceil(len(task.train_y) / plan.batch_size)
        self.scheduler = warmup_cosine(self.optimizer, plan.epochs * self.steps_per_epoch)
        self.checkpoint = self.folder / "checkpoint"
        self.average = WeightAverage(self.model, plan.ema) if plan.ema else None
        self.progress = self._resume_or_start(restart, start_from)
        self.train_x, self.train_y = task.train_x.to(device), task.train_y.to(device)
        self.distillation = None
        if plan.teacher is not None:
            check_teacher(self.document, Path(plan.teacher))
            _, teacher = load_trained(Path(plan.teacher), task)
            self.distillation = DistillationLoss(teacher.to(device).to(memory_format=torch.channels_last))
        smoothing = plan.label_smoothing
        loss = self.distillation or (lambda logits, targets, inputs: nn.functional.cross_entropy(
            logits, targets, label_smoothing=smoothing))
        self.step = TrainStep(self.group.wrap(self.model, device), self.optimizer, device, self.precision,
                              micro_batch=plan.batch_size // plan.accumulate, loss=loss)

    def _resume_or_start(self, restart: bool, start_from: Path | None) -> Progress:
        if not restart and recover_checkpoint(self.checkpoint):
            saved = load_checkpoint(self.checkpoint, self.model, self.optimizer, self.scheduler,
                                    self.average.tensors if self.average else None)
            before = TrainPlan()  # a checkpoint from before a setting existed ran with its default
            different = [k for k in TrainPlan.MUST_MATCH
                         if saved["plan"].get(k, getattr(before, k)) != getattr(self.plan, k)]
            if different:
                raise UserError(f"{self.checkpoint} was made with different {', '.join(different)}; use the same "
                                "options to resume, or --restart to start over")
            progress = Progress.from_checkpoint(saved, self.checkpoint)
            if progress.data not in (None, self.task.name):
                raise UserError(f"{self.checkpoint} trains on data {progress.data}, not {self.task.name}; use the "
                                "same --data to resume, or --restart to start over")
            if progress.best_epoch is not None and not (self.folder / "best.safetensors").is_file():
                raise UserError(f"{self.folder} lost best.safetensors, the weights of its best epoch so far; "
                                "run again with --restart to start over")
            return progress
        if start_from is not None:
            load_weights(start_from, self.model)
            if self.average:
                self.average = WeightAverage(self.model, self.plan.ema)
        return Progress(plan=asdict(self.plan), data=self.task.name)

    def run(self, show_progress: bool) -> None:
        """Epochs until the plan's last or an early stop; a checkpoint at each epoch's end."""
        show_progress = show_progress and self.group.leader
        bar = None
        # in a log, a line per epoch and one a minute within an epoch, instead of a bar
        self.log_every = LOG_SECONDS if show_progress and not sys.stderr.isatty() else None
        if show_progress and sys.stderr.isatty():

            bar = tqdm(total=self.plan.epochs * self.steps_per_epoch, initial=self.progress.global_step,
                       unit="step", dynamic_ncols=True, desc="training")
        self.clock, self.last_checkpoint = EnergyClock(self.meter, self.group), time.monotonic()
        while self.progress.epoch < self.plan.epochs and not self.progress.done:
            self._train_epoch(bar)
            with self._evaluated_weights():
                accuracy = self._close_epoch(show_progress and bar is None)
                self._keep_if_best(accuracy)
            self.progress.epoch, self.progress.step = self.progress.epoch + 1, 0
            self._checkpoint_now()
        if bar is not None:
            bar.close()
        self.group.close()

    @contextlib.contextmanager
    def _evaluated_weights(self):
        """The weights an epoch is judged and kept by: the moving average when the recipe has one."""
        if self.average is None:
            yield
            return
        self.average.swap(self.model)
        try:
            yield
        finally:
            self.average.swap(self.model)

    def _train_epoch(self, bar) -> None:
        plan, progress, epoch = self.plan, self.progress, self.progress.epoch
        order = torch.randperm(len(self.train_y), generator=torch.Generator().manual_seed(plan.seed * 100_003 + epoch))
        order = order.to(self.device)
        step_loss = math.nan
        began = last_line = time.monotonic()
        first_step = progress.step
        for step in range(progress.step, self.steps_per_epoch):
            interrupt.check()
            index = order[step * plan.batch_size:(step + 1) * plan.batch_size]
            if len(index) >= MIN_BATCH * self.group.world:  # a last batch of one image cannot train BatchNorm
                share = self.group.share(index)
                x = augment_batch(self.train_x[share], plan.augment,
                                  batch_generator(self.device, plan.seed, progress.global_step, self.group.rank))
                step_loss = self.step(x, self.train_y[share])
                if self.average is not None:
                    self.average.update(self.model, progress.global_step)
            self.scheduler.step()
            progress.step, progress.global_step = step + 1, progress.global_step + 1
            if bar is not None:
                bar.set_description(f"epoch {epoch + 1}/{plan.epochs}")
                bar.set_postfix_str(f"loss {step_loss:.3f}", refresh=False)
                bar.update(1)
            if self.log_every is not None and time.monotonic() - last_line >= self.log_every:
                last_line = time.monotonic()
                pace = (last_line - began) / (step + 1 - first_step)
                logger.info(f"epoch {epoch + 1}/{plan.epochs}: step {step + 1}/{self.steps_per_epoch}, loss "
                            f"{step_loss:.3f}, about {format_duration(pace * (self.steps_per_epoch - step - 1))} "
                            "left in this epoch")
            late = time.monotonic() - self.last_checkpoint > 60 * plan.checkpoint_minutes
            if progress.global_step % plan.checkpoint_steps == 0 or self.group.agree(late):
                self._checkpoint_now()

    def _close_epoch(self, print_line: bool) -> float:
        """Recalibrate BatchNorm, validate, record the epoch; the validation accuracy."""
        progress = self.progress
        recalibrate_batchnorm(self.model, self.train_x, torch.channels_last, images=2048,
                              batch_size=self.step.micro_batch)
        accuracy, val_loss = evaluate_accuracy(self.model, self.task.val_x, self.task.val_y, self.device)
        self.clock.bank(progress)
        progress.history.append({"epoch": progress.epoch + 1, "val_accuracy": accuracy, "val_loss": val_loss,
                                 "train_seconds": progress.train_seconds, "energy_j": progress.energy_j})
        if print_line:
            logger.info(f"epoch {progress.epoch + 1}/{self.plan.epochs}: validation accuracy {accuracy:.2%}, "
                        f"loss {val_loss:.3f}, {progress.train_seconds:.0f} s")
        if self.plan.target is not None and progress.time_to_target_s is None and accuracy >= self.plan.target:
            progress.time_to_target_s = progress.train_seconds
        return accuracy

    def _keep_if_best(self, accuracy: float) -> None:
        progress = self.progress
        if self.group.agree(accuracy > progress.best_accuracy):  # worker 0's evaluation decides
            progress.best_accuracy, progress.best_epoch, progress.bad_epochs = accuracy, progress.epoch + 1, 0
            if self.group.leader:
                save_weights(self.folder / "best.safetensors", self.model)
        else:
            progress.bad_epochs += 1
            progress.done = bool(self.plan.patience and progress.bad_epochs >= self.plan.patience)  # early stop

    def _checkpoint_now(self) -> None:
        self.clock.bank(self.progress)
        if self.group.leader:
            save_checkpoint(self.checkpoint, self.model, self.optimizer, self.scheduler, asdict(self.progress),
                            self.average.tensors if self.average else None)
        self.group.barrier()  # nobody runs ahead of the checkpoint a restart would resume from
        self.last_checkpoint = time.monotonic()

    def report(self, grid: float, pue: float) -> dict:
        """The best epoch's weights tested, saved as the export's weights, and report.json."""
        progress, task = self.progress, self.task
        load_weights(self.folder / "best.safetensors", self.model)
        test_accuracy, _ = evaluate_accuracy(self.model, task.test_x, task.test_y, self.device)
        save_weights(self.folder / WEIGHTS, self.model)
        cost = profile(self.model, task.input_shape)
        report = efficiency_report(test_accuracy=test_accuracy, params=cost.params, macs=cost.macs,
                                   energy_j=progress.energy_j, energy_source=self.meter.source,
                                   train_seconds=progress.train_seconds, time_to_target_s=progress.time_to_target_s,
                                   target=self.plan.target, grid_g_per_kwh=grid, pue=pue)
        report.update(genome=self.document["genome"], data=task.name, device=str(self.device),
                      precision=self.precision, epochs_run=progress.epoch, best_epoch=progress.best_epoch,
                      early_stopped=progress.done, history=progress.history, plan=asdict(self.plan),
                      recipe=self.plan.recipe.to_dict(),
                      processes=self.group.world, restarts=self.group.restarts)
        if self.distillation is not None:
            teacher_accuracy, _ = evaluate_accuracy(self.distillation.teacher, task.test_x, task.test_y, self.device)
            report["teacher"] = {"folder": self.plan.teacher, "test_accuracy": teacher_accuracy}
        (self.folder / "report.json").write_text(json.dumps(report, indent=2))
        return report


def train_exported(folder: Path, task, plan: TrainPlan, device_name: str = "auto", meter_name: str = "auto",
                   grid: float = DEFAULT_GRID_G_PER_KWH, pue: float = 1.0, restart: bool = False,
                   show_progress: bool = True, start_from: Path | None = None, distributed: bool = False) -> dict:
    """Train (or resume training) the architecture in `folder`; returns the report. A new run
    starts from the weights in `start_from` when given (fine-tuning), else from scratch. Under
    torchrun (`distributed`), this is one worker of several (eas.training.distributed); only worker 0
    writes, and returns the report (the others return None)."""
    training = FullTraining(folder, task, plan, device_name, meter_name, restart, start_from, distributed)
    training.run(show_progress)
    return training.report(grid, pue) if training.group.leader else None
