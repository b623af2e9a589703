"""`eas train DIR`: train an exported architecture fully, resumable after kill -9.

Checkpoints (model, optimiser, scheduler, RNG, epoch, step, energy so far) every N steps or
minutes and at each epoch end. Data order comes from a generator seeded by (seed, epoch) and
the RNG state is restored, so a resumed run takes the same steps as an uninterrupted one.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from eas.builder import build
from eas.checkpoint import load_checkpoint, save_checkpoint, save_weights
from eas.energy import make_meter
from eas.errors import UserError
from eas.evaluate import resolve_device
from eas.green import DEFAULT_GRID_G_PER_KWH, efficiency_report
from eas.train import evaluate_accuracy, recalibrate_batchnorm, resolve_precision


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

    # Settings that change the result: a checkpoint made with others cannot be resumed.
    MUST_MATCH = ("epochs", "batch_size", "accumulate", "lr", "weight_decay", "precision", "seed")

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or self.accumulate < 1:
            raise UserError("epochs, batch size and accumulation steps must be at least 1")
        if self.batch_size % self.accumulate:
            raise UserError(f"--batch-size {self.batch_size} is not divisible by --accumulate {self.accumulate}")


def read_arch(folder: Path) -> dict:
    path = Path(folder) / "arch.json"
    if not path.exists():
        raise UserError(f"{folder} holds no arch.json (make one with `eas export`)")
    try:
        document = json.loads(path.read_text())
        document["genome"], document["task"]["input_shape"], document["task"]["num_classes"]  # noqa: B018
    except (ValueError, KeyError, TypeError) as error:
        raise UserError(f"{path} is not an EAS architecture file ({error})") from None
    return document


def check_task_fits(document: dict, task) -> None:
    want_shape = tuple(document["task"]["input_shape"])
    want_classes = int(document["task"]["num_classes"])
    if task.input_shape[0] != want_shape[0]:
        raise UserError(f"data {task.name} has {task.input_shape[0]} channel(s); the architecture expects "
                        f"{want_shape[0]}")
    if task.num_classes != want_classes:
        raise UserError(f"data {task.name} has {task.num_classes} classes; the architecture expects {want_classes}")


def _schedule(optimizer, total_steps: int):
    warmup = max(1, total_steps // 20)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(
        (s + 1) / warmup, 0.5 * (1 + math.cos(math.pi * min(1.0, s / total_steps)))))


def train_exported(folder: Path, task, plan: TrainPlan, device_name: str = "auto", meter_name: str = "auto",
                   grid: float = DEFAULT_GRID_G_PER_KWH, pue: float = 1.0, restart: bool = False,
                   show_progress: bool = True) -> dict:
    """Train (or resume training) the architecture in `folder`; returns the report."""
    folder = Path(folder)
    document = read_arch(folder)
    check_task_fits(document, task)
    device = resolve_device(device_name)
    meter, _ = make_meter(meter_name, cuda=device.type == "cuda")
    precision = resolve_precision(plan.precision, device)
    torch.manual_seed(plan.seed)
    model = build(document["genome"], task.input_shape, task.num_classes).to(device)
    model = model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.AdamW(model.parameters(), lr=plan.lr, weight_decay=plan.weight_decay)
    n = len(task.train_y)
    steps_per_epoch = math.ceil(n / plan.batch_size)
    scheduler = _schedule(optimizer, plan.epochs * steps_per_epoch)
    checkpoint = folder / "checkpoint"
    progress = {"epoch": 0, "step": 0, "global_step": 0, "energy_j": 0.0, "train_seconds": 0.0,
                "best_accuracy": -1.0, "best_epoch": None, "bad_epochs": 0, "time_to_target_s": None,
                "history": [], "plan": asdict(plan), "done": False}
    if checkpoint.exists() and not restart:
        saved = json.loads((checkpoint / "state.json").read_text())["progress"]["plan"]
        different = [k for k in TrainPlan.MUST_MATCH if saved.get(k) != getattr(plan, k)]
        if different:
            raise UserError(f"{checkpoint} was made with different {', '.join(different)}; use the same "
                            "options to resume, or --restart to start over")
        progress = load_checkpoint(checkpoint, model, optimizer, scheduler)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    loss_fn = nn.CrossEntropyLoss()
    train_x, train_y = task.train_x.to(device), task.train_y.to(device)
    micro = plan.batch_size // plan.accumulate

    bar = None
    if show_progress:
        from tqdm import tqdm

        bar = tqdm(total=plan.epochs * steps_per_epoch, initial=progress["global_step"], unit="step",
                   dynamic_ncols=True, desc="training")
    token, segment_start, last_checkpoint = meter.start(), time.perf_counter(), time.monotonic()

    def bank_energy_and_time() -> None:
        # Move the running meter window into the progress record (it survives a restart).
        nonlocal token, segment_start
        reading = meter.stop(token)
        progress["energy_j"] += reading.joules
        progress["train_seconds"] += time.perf_counter() - segment_start
        token, segment_start = meter.start(), time.perf_counter()

    def checkpoint_now() -> None:
        nonlocal last_checkpoint
        bank_energy_and_time()
        save_checkpoint(checkpoint, model, optimizer, scheduler, progress)
        last_checkpoint = time.monotonic()

    while progress["epoch"] < plan.epochs and not progress["done"]:
        epoch = progress["epoch"]
        order = torch.randperm(n, generator=torch.Generator().manual_seed(plan.seed * 100_003 + epoch)).to(device)
        model.train()
        for step in range(progress["step"], steps_per_epoch):
            index = order[step * plan.batch_size:(step + 1) * plan.batch_size]
            optimizer.zero_grad(set_to_none=True)
            step_loss = 0.0
            for start in range(0, len(index), micro):
                chunk = index[start:start + micro]
                x = train_x[chunk].contiguous(memory_format=torch.channels_last)
                with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                    loss = loss_fn(model(x), train_y[chunk]) * (len(chunk) / len(index))
                scaler.scale(loss).backward()
                step_loss += loss.item()
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            progress["step"], progress["global_step"] = step + 1, progress["global_step"] + 1
            if bar is not None:
                bar.set_description(f"epoch {epoch + 1}/{plan.epochs}")
                bar.set_postfix_str(f"loss {step_loss:.3f}", refresh=False)
                bar.update(1)
            if progress["global_step"] % plan.checkpoint_steps == 0 or (
                    time.monotonic() - last_checkpoint > 60 * plan.checkpoint_minutes):
                checkpoint_now()
        recalibrate_batchnorm(model, train_x, torch.channels_last, batch_size=micro)
        accuracy, val_loss = evaluate_accuracy(model, task.val_x, task.val_y, device)
        bank_energy_and_time()
        progress["history"].append({"epoch": epoch + 1, "val_accuracy": accuracy, "val_loss": val_loss,
                                    "train_seconds": progress["train_seconds"], "energy_j": progress["energy_j"]})
        if plan.target is not None and progress["time_to_target_s"] is None and accuracy >= plan.target:
            progress["time_to_target_s"] = progress["train_seconds"]
        if accuracy > progress["best_accuracy"]:
            progress.update(best_accuracy=accuracy, best_epoch=epoch + 1, bad_epochs=0)
            save_weights(folder / "best.safetensors", model)
        else:
            progress["bad_epochs"] += 1
            if plan.patience and progress["bad_epochs"] >= plan.patience:
                progress["done"] = True  # early stop
        progress["epoch"], progress["step"] = epoch + 1, 0
        checkpoint_now()
    if bar is not None:
        bar.close()

    from safetensors.torch import load_file

    model.load_state_dict(load_file(str(folder / "best.safetensors")))
    test_accuracy, _ = evaluate_accuracy(model, task.test_x, task.test_y, device)
    save_weights(folder / "model.safetensors", model)
    from eas.cost import profile

    cost = profile(model, task.input_shape)
    report = efficiency_report(test_accuracy=test_accuracy, params=cost.params, macs=cost.macs,
                               energy_j=progress["energy_j"], energy_source=meter.source,
                               train_seconds=progress["train_seconds"], time_to_target_s=progress["time_to_target_s"],
                               target=plan.target, grid_g_per_kwh=grid, pue=pue)
    report.update(genome=document["genome"], data=task.name, device=str(device), precision=precision,
                  epochs_run=progress["epoch"], best_epoch=progress["best_epoch"],
                  early_stopped=progress["done"], history=progress["history"], plan=asdict(plan))
    (folder / "report.json").write_text(json.dumps(report, indent=2))
    return report
