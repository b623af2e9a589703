"""`eas verify`: retrain a study's Pareto set at a higher fidelity and report how far to trust it."""

from __future__ import annotations

from typing import Annotated

import typer

from eas.cli.options import DeviceOption, JsonOption, StorageOption, StudyArgument, ThreadsOption, emit_json


def verify_command(
    study: StudyArgument,
    top: Annotated[int, typer.Option("--top", help="Verify the K most accurate members of the Pareto set.",
                                     min=1, max=100)] = 5,
    factor: Annotated[float, typer.Option("--factor", help="Train for this many times the study's "
                                          "full-fidelity steps.", min=0.1, max=100.0)] = 3.0,
    seeds: Annotated[int, typer.Option("--seeds", help="Train each member with this many other seeds "
                                       "(their spread is reported).", min=1, max=10)] = 1,
    storage: StorageOption = None,
    device: DeviceOption = "auto",
    threads: ThreadsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Retrain the Pareto set longer, with other seeds: rank agreement and who held their place."""
    from eas.study.storage import check_study_name, default_url

    check_study_name(study)
    url = storage or default_url(study)
    import torch

    from eas.data.datasets import load_dataset
    from eas.reports.summary import verification_lines
    from eas.search.verify import verify_front
    from eas.study import schema
    from eas.study.reader import StudyReader
    from eas.study.storage import open_storage

    if threads:
        torch.set_num_threads(threads)
    loaded = StudyReader(url, study).loaded()
    task = load_dataset(loaded.settings["data"], seed=int(loaded.settings.get("seed", 0)))

    def progress(row: dict) -> None:
        if not as_json:
            typer.echo(f"trial {row['trial']}: search {row['search_accuracy']:.2%} -> verified "
                       f"{row['verified_accuracy']:.2%}", err=True)

    result = verify_front(loaded, task, top, factor, seeds, device, on_result=progress)
    import optuna

    stored = optuna.load_study(study_name=study, storage=open_storage(url))
    history = stored.user_attrs.get(schema.VERIFICATION)
    stored.set_user_attr(schema.VERIFICATION, [*(history if isinstance(history, list) else [])[-9:], result])
    if as_json:
        emit_json(result)
        return
    typer.echo("\n".join(verification_lines(result)))
