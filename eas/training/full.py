"""`eas train DIR`: train an exported architecture fully, resumable after kill -9.

Checkpoints (model, optimiser, scheduler, RNG, epoch, step, energy so far) every N steps or
minutes and at each epoch end. Data order comes from a generator seeded by (seed, epoch) and
the RNG state is restored, so a resumed run takes the same steps as an uninterrupted one.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from eas import interrupt
from eas.arch.builder import build
from eas.errors import UserError
from eas.measure.device import resolve_device
from eas.measure.energy import make_meter
from eas.training.checkpoint import load_checkpoint, load_weights, recover_checkpoint, save_checkpoint, save_weights
from eas.training.green import DEFAULT_GRID_G_PER_KWH, efficiency_report
from eas.training.step import (
    MIN_BATCH,
    DistillationLoss,
    TrainStep,
    evaluate_accuracy,
    recalibrate_batchnorm,
    resolve_precision,
    warmup_cosine,
)

WEIGHTS = "model.safetensors"  # what `eas train` leaves: the weights of the best epoch


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

    # Settings that change the result: a checkpoint made with others cannot be resumed.
    MUST_MATCH = ("epochs", "batch_size", "accumulate", "lr", "weight_decay", "precision", "seed", "teacher")

    def __post_init__(self) -> None:
        from eas.training.proxy import Fidelity

        if self.epochs < 1 or self.accumulate < 1:
            raise UserError("epochs and accumulation steps must be at least 1")
        Fidelity(epochs=self.epochs, batch_size=self.batch_size, lr=self.lr, weight_decay=self.weight_decay,
                 precision=self.precision)  # the same checks as a proxy fidelity
        if self.batch_size % self.accumulate or self.batch_size // self.accumulate < MIN_BATCH:
            raise UserError(f"--batch-size {self.batch_size} must split into --accumulate {self.accumulate} "
                            f"micro-batches of at least {MIN_BATCH} images each")
        if self.seed < 0:
            raise UserError(f"--seed must be at least 0 (got {self.seed})")


def read_arch(folder: Path) -> dict:
    """arch.json of an export, checked: a genome that decodes, a sane shape and class count."""
    from eas.arch.bounds import check_buildable, check_classes, check_shape
    from eas.arch.genome import Arch

    path = Path(folder) / "arch.json"
    if not path.exists():
        raise UserError(f"{folder} holds no arch.json (make one with `eas export`)")
    try:
        document = json.loads(path.read_text())
        genome, task = document["genome"], document["task"]
        shape = check_shape(task["input_shape"], f"{path}: input_shape")
        classes = check_classes(task["num_classes"], f"{path}: num_classes")
        check_buildable(Arch.decode(genome), shape, classes)
        _check_training(document.get("training") or {})
    except (ValueError, KeyError, TypeError) as error:
        raise UserError(f"{path} is not an EAS architecture file ({type(error).__name__}: {error})") from None
    except UserError as error:
        raise UserError(f"{path}: {error}") from None
    return document


def _check_training(training: dict) -> None:
    from eas.arch.space import TRAIN_FIELDS

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
    try:
        load_weights(weights, model)
    except (RuntimeError, OSError, ValueError) as error:
        raise UserError(f"{weights} does not hold this architecture's weights ({str(error).splitlines()[0]})") from None
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
    want_shape = tuple(document["task"]["input_shape"])
    want_classes = int(document["task"]["num_classes"])
    if task.input_shape[0] != want_shape[0]:
        raise UserError(f"data {task.name} has {task.input_shape[0]} channel(s); the architecture expects "
                        f"{want_shape[0]}")
    if task.num_classes != want_classes:
        raise UserError(f"data {task.name} has {task.num_classes} classes; the architecture expects {want_classes}")


def train_exported(folder: Path, task, plan: TrainPlan, device_name: str = "auto", meter_name: str = "auto",
                   grid: float = DEFAULT_GRID_G_PER_KWH, pue: float = 1.0, restart: bool = False,
                   show_progress: bool = True, start_from: Path | None = None, distributed: bool = False) -> dict:
    """Train (or resume training) the architecture in `folder`; returns the report. A new run
    starts from the weights in `start_from` when given (fine-tuning), else from scratch. Under
    torchrun (`distributed`), this is one worker of several (eas.training.distributed); only worker 0
    writes, and returns the report (the others return None)."""
    from eas.training.distributed import Group, energy_share

    interrupt.install()
    folder = Path(folder)
    document = read_arch(folder)
    check_task_fits(document, task)
    device = resolve_device(device_name)
    group = Group.from_environment(device.type == "cuda") if distributed else Group()
    if device.type == "cuda" and distributed:
        device = torch.device("cuda", group.local_rank)
        torch.cuda.set_device(device)
    meter, _ = make_meter(meter_name, cuda=device.type == "cuda")
    precision = resolve_precision(plan.precision, device)
    torch.manual_seed(plan.seed)
    model = build(document["genome"], task.input_shape, task.num_classes).to(device)
    model = model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.AdamW(model.parameters(), lr=plan.lr, weight_decay=plan.weight_decay)
    n = len(task.train_y)
    steps_per_epoch = math.ceil(n / plan.batch_size)
    scheduler = warmup_cosine(optimizer, plan.epochs * steps_per_epoch)
    checkpoint = folder / "checkpoint"
    progress = {"epoch": 0, "step": 0, "global_step": 0, "energy_j": 0.0, "train_seconds": 0.0,
                "best_accuracy": -1.0, "best_epoch": None, "bad_epochs": 0, "time_to_target_s": None,
                "history": [], "plan": asdict(plan), "done": False}
    if not restart and recover_checkpoint(checkpoint):
        saved = load_checkpoint(checkpoint, model, optimizer, scheduler)
        different = [k for k in TrainPlan.MUST_MATCH if saved["plan"].get(k) != getattr(plan, k)]
        if different:
            raise UserError(f"{checkpoint} was made with different {', '.join(different)}; use the same "
                            "options to resume, or --restart to start over")
        progress = saved
    elif start_from is not None:
        load_weights(start_from, model)
    train_x, train_y = task.train_x.to(device), task.train_y.to(device)
    micro = plan.batch_size // plan.accumulate
    loss = None
    if plan.teacher is not None:
        check_teacher(document, Path(plan.teacher))
        _, teacher = load_trained(Path(plan.teacher), task)
        loss = DistillationLoss(teacher.to(device).to(memory_format=torch.channels_last))
    train_step = TrainStep(group.wrap(model, device), optimizer, device, precision, micro_batch=micro, loss=loss)

    bar = None
    show_progress = show_progress and group.leader
    if show_progress and sys.stderr.isatty():  # in a log, one line per epoch instead
        from tqdm import tqdm

        bar = tqdm(total=plan.epochs * steps_per_epoch, initial=progress["global_step"], unit="step",
                   dynamic_ncols=True, desc="training")
    token, segment_start, last_checkpoint = meter.start(), time.perf_counter(), time.monotonic()

    def bank_energy_and_time() -> None:
        # Move the running meter window into the progress record (it survives a restart).
        nonlocal token, segment_start
        reading = meter.stop(token)
        progress["energy_j"] += group.total(energy_share(reading.joules, reading.source, group))
        progress["train_seconds"] += time.perf_counter() - segment_start
        token, segment_start = meter.start(), time.perf_counter()

    def checkpoint_now() -> None:
        nonlocal last_checkpoint
        bank_energy_and_time()
        if group.leader:
            save_checkpoint(checkpoint, model, optimizer, scheduler, progress)
        group.barrier()  # nobody runs ahead of the checkpoint a restart would resume from
        last_checkpoint = time.monotonic()

    while progress["epoch"] < plan.epochs and not progress["done"]:
        epoch = progress["epoch"]
        order = torch.randperm(n, generator=torch.Generator().manual_seed(plan.seed * 100_003 + epoch)).to(device)
        step_loss = math.nan
        for step in range(progress["step"], steps_per_epoch):
            interrupt.check()
            index = order[step * plan.batch_size:(step + 1) * plan.batch_size]
            if len(index) >= MIN_BATCH * group.world:  # a last batch of one image cannot train BatchNorm
                share = group.share(index)
                step_loss = train_step(train_x[share], train_y[share])
            scheduler.step()
            progress["step"], progress["global_step"] = step + 1, progress["global_step"] + 1
            if bar is not None:
                bar.set_description(f"epoch {epoch + 1}/{plan.epochs}")
                bar.set_postfix_str(f"loss {step_loss:.3f}", refresh=False)
                bar.update(1)
            late = time.monotonic() - last_checkpoint > 60 * plan.checkpoint_minutes
            if progress["global_step"] % plan.checkpoint_steps == 0 or group.agree(late):
                checkpoint_now()
        recalibrate_batchnorm(model, train_x, torch.channels_last, images=2048, batch_size=train_step.micro_batch)
        accuracy, val_loss = evaluate_accuracy(model, task.val_x, task.val_y, device)
        bank_energy_and_time()
        progress["history"].append({"epoch": epoch + 1, "val_accuracy": accuracy, "val_loss": val_loss,
                                    "train_seconds": progress["train_seconds"], "energy_j": progress["energy_j"]})
        if show_progress and bar is None:
            print(f"epoch {epoch + 1}/{plan.epochs}: validation accuracy {accuracy:.2%}, loss {val_loss:.3f}, "
                  f"{progress['train_seconds']:.0f} s", file=sys.stderr, flush=True)
        if plan.target is not None and progress["time_to_target_s"] is None and accuracy >= plan.target:
            progress["time_to_target_s"] = progress["train_seconds"]
        if group.agree(accuracy > progress["best_accuracy"]):  # worker 0's evaluation decides
            progress.update(best_accuracy=accuracy, best_epoch=epoch + 1, bad_epochs=0)
            if group.leader:
                save_weights(folder / "best.safetensors", model)
        else:
            progress["bad_epochs"] += 1
            if plan.patience and progress["bad_epochs"] >= plan.patience:
                progress["done"] = True  # early stop
        progress["epoch"], progress["step"] = epoch + 1, 0
        checkpoint_now()
    if bar is not None:
        bar.close()
    group.close()
    if not group.leader:
        return None

    load_weights(folder / "best.safetensors", model)
    test_accuracy, _ = evaluate_accuracy(model, task.test_x, task.test_y, device)
    save_weights(folder / WEIGHTS, model)
    from eas.arch.profile import profile

    cost = profile(model, task.input_shape)
    report = efficiency_report(test_accuracy=test_accuracy, params=cost.params, macs=cost.macs,
                               energy_j=progress["energy_j"], energy_source=meter.source,
                               train_seconds=progress["train_seconds"], time_to_target_s=progress["time_to_target_s"],
                               target=plan.target, grid_g_per_kwh=grid, pue=pue)
    report.update(genome=document["genome"], data=task.name, device=str(device), precision=precision,
                  epochs_run=progress["epoch"], best_epoch=progress["best_epoch"],
                  early_stopped=progress["done"], history=progress["history"], plan=asdict(plan),
                  processes=group.world, restarts=group.restarts)
    if plan.teacher is not None:
        teacher_accuracy, _ = evaluate_accuracy(loss.teacher, task.test_x, task.test_y, device)
        report["teacher"] = {"folder": plan.teacher, "test_accuracy": teacher_accuracy}
    (folder / "report.json").write_text(json.dumps(report, indent=2))
    return report
