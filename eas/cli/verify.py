"""`eas verify`: retrain a study's Pareto set at a higher fidelity, beside hand-designed baselines
trained the same way, and report how far to trust the front and what it is worth."""

from __future__ import annotations

from typing import Annotated

import typer

from eas.cli.options import (
    AugmentOption,
    DeviceOption,
    EmaOption,
    JsonOption,
    LabelSmoothingOption,
    StorageOption,
    StudyArgument,
    ThreadsOption,
    emit_json,
)


def verify_command(
    study: StudyArgument,
    top: Annotated[int | None, typer.Option("--top", help="Verify K members of the strict Pareto set spread over "
                                            "its cost range, the most accurate and the cheapest among them "
                                            "(default 5, or all when it holds fewer).", min=1, max=100)] = None,
    factor: Annotated[float, typer.Option("--factor", help="Train for this many times the study's "
                                          "full-fidelity steps.", min=0.1, max=100.0)] = 3.0,
    epochs: Annotated[float | None, typer.Option("--epochs", help="Train this many epochs of the training "
                                                 "images instead of --factor times the full fidelity.",
                                                 min=0.01, max=10_000)] = None,
    subset: Annotated[int | None, typer.Option("--subset", help="Train on at most N images (default: the "
                                               "study's full fidelity's).", min=2)] = None,
    seeds: Annotated[int | None, typer.Option("--seeds", help="Train each model with this many other seeds "
                                              "(their spread is reported); default 2 with baselines, else 1.",
                                              min=1, max=10)] = None,
    baselines: Annotated[list[str] | None, typer.Option(
        "--baselines", help="Hand-designed networks trained beside the front: FAMILY@A,B,C (e.g. "
        "mobilenet_v3_small@0.5,0.75,1.0; repeat for more families), auto (the families the space "
        "contains, at 0.35, 0.5, 0.75, 1.0) or none.")] = None,
    init: Annotated[str, typer.Option("--init", help="scratch: train each member from fresh weights, as `eas "
                                      "train` will; inherited (one-shot studies): fine-tune from the supernet's "
                                      "weights.")] = "scratch",
    deploy: Annotated[str | None, typer.Option(
        "--deploy", help="Also write each member in this deployment format (pte: ExecuTorch, ort: ONNX Runtime's "
        "mobile format), run it in that format's runtime and compare it with PyTorch: deployable or not, with "
        "the reason, agreement, latency and size (float, and int8 where the format has it).")] = None,
    augment: AugmentOption = "none",
    label_smoothing: LabelSmoothingOption = 0.0,
    ema: EmaOption = 0.0,
    storage: StorageOption = None,
    device: DeviceOption = "auto",
    threads: ThreadsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Retrain the Pareto set longer, with other seeds and beside hand-designed baselines: rank
    agreement, who held their place, and the gain at equal cost."""
    from eas.errors import UserError
    from eas.study.storage import check_study_name, default_url

    check_study_name(study)
    url = storage or default_url(study)
    import optuna
    import torch

    from eas.arch.space import space_from_definition
    from eas.data.datasets import load_dataset
    from eas.nas.baselines import check_baselines_fit, parse_baselines, with_adapted
    from eas.nas.verify import VerifyPlan, verify_front
    from eas.reports.summary import verification_lines
    from eas.study import schema
    from eas.study.reader import StudyReader
    from eas.study.storage import open_storage
    from eas.training.recipe import Recipe

    deploy_format, deploy_check = _deploy_check(deploy)  # refused before the study is read
    loaded = StudyReader(url, study).loaded()
    space = space_from_definition(loaded.settings["space"], source=f"study {study}")
    names = parse_baselines(baselines or ["auto"], space)
    seeds = seeds or (2 if names else 1)
    if names and seeds < 2:
        raise UserError("a comparison with baselines needs at least 2 seeds (--seeds 2)")
    recipe = Recipe.parse(augment, label_smoothing, ema, loaded.settings["data"])
    if threads:
        torch.set_num_threads(threads)
    task = load_dataset(loaded.settings["data"], seed=int(loaded.settings.get("seed", 0)))
    names = with_adapted(names, task.input_shape)  # as published and as adapted to this input, both labelled
    check_baselines_fit(names, task.input_shape, task.num_classes, loaded.settings["data"])
    stored = optuna.load_study(study_name=study, storage=open_storage(url))
    runs = {k.removeprefix(schema.VERIFY_RUN): v for k, v in stored.user_attrs.items()
            if k.startswith(schema.VERIFY_RUN)}

    def save_run(key: str, run: dict) -> None:  # each run its own attribute: written at once, never merged
        stored.set_user_attr(schema.VERIFY_RUN + key, run)

    searched = {r.number: r.value("accuracy") for r in loaded.records}

    def progress(model, stats: dict) -> None:
        if as_json:
            return
        who = model.name or f"trial {model.trial}: search {searched[model.trial]:.2%} ->"
        typer.echo(f"{who} verified {stats['verified_accuracy']:.2%} on the test split", err=True)

    if init not in ("scratch", "inherited"):
        raise UserError(f"--init must be scratch or inherited (got {init!r})")
    plan = VerifyPlan(top, factor, seeds, tuple(names), recipe, device, epochs, subset, init, deploy_format,
                      deploy_check)
    result = verify_front(loaded, task, plan, runs, save_run, on_result=progress)
    history = stored.user_attrs.get(schema.VERIFICATION)
    stored.set_user_attr(schema.VERIFICATION, [*(history if isinstance(history, list) else [])[-9:], result])
    if as_json:
        emit_json(result)
        return
    typer.echo("\n".join(verification_lines(result)))


def _deploy_check(text: str | None):
    """(format name, the check verify runs on each trained member), or (None, None)."""
    if text is None:
        return None, None
    from eas.deploy.formats import FORMATS, parse_formats
    from eas.errors import UserError

    names = parse_formats(text, "--deploy")
    if len(names) != 1:
        raise UserError(f"--deploy takes one format: {', '.join(FORMATS)} (got {text!r})")
    from eas.deploy.deployable import check_deployable

    chosen = FORMATS[names[0]]
    return chosen.name, lambda model, task, threads: check_deployable(model, task, chosen, threads)
