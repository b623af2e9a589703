"""`eas stop` and `eas resume`: take a study out of the worker pool and put it back, without
touching any process (eas.study.queue)."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from eas.cli.options import BudgetOption, PriorityOption, StorageOption, StudyArgument
from eas.errors import UserError


def _entry_and_storage(study: str, storage: str | None):
    from eas.study.reader import entry_of
    from eas.study.storage import check_study_name, default_url, open_storage

    check_study_name(study)
    url = storage or default_url(study)
    entry = entry_of(url, study)  # read-only: a missing study is an error before anything is opened to write
    return entry, open_storage(url)


def stop_command(study: StudyArgument, storage: StorageOption = None) -> None:
    """Stop a study: workers leave it after their current trial; `eas resume` reopens it."""
    from eas.study import schema
    from eas.study.queue import state_of

    entry, opened = _entry_and_storage(study, storage)
    now = time.time()
    state = state_of(entry.run, entry.counted, now)
    if state in ("unqueued", "stopped", "done"):
        typer.echo(f"study {study!r} is {state}: nothing to stop")
        return
    opened.set_study_user_attr(entry.study_id, schema.RUN_STOPPED, now)
    typer.echo(f"stopped study {study!r}: {len(entry.workers)} worker(s) leave it after their current trial; "
               f"`eas resume {study}` reopens it")


def resume_command(
    study: StudyArgument,
    storage: StorageOption = None,
    budget: BudgetOption = None,
    trials: Annotated[int | None, typer.Option("--trials", help="Allow N more trials from now.")] = None,
    priority: Annotated[int | None, PriorityOption] = None,
) -> None:
    """Reopen a stopped study, or give a study a new budget from now.

    A study without a pool budget (made by an older EAS) is queued by giving it one."""
    from dataclasses import replace

    from eas.nas.budget import Budget
    from eas.study.queue import Run, budget_text, save, state_of

    more = Budget.parse(budget, trials) if budget is not None or trials is not None else None
    entry, opened = _entry_and_storage(study, storage)
    now = time.time()
    if entry.run is None and more is None:
        raise UserError(f"study {study!r} has no pool budget ({entry.problem}): give --budget and/or --trials")
    run = (entry.run or Run()).extended(now, more and more.seconds, more and more.trials, entry.counted)
    if priority is not None:
        run = replace(run, priority=priority)
    state = state_of(run, entry.counted, now)
    if state == "done":
        raise UserError(f"study {study!r} has spent its budget ({budget_text(run, entry.counted, now)}): "
                        "give --budget and/or --trials for more")
    save(opened, entry.study_id, run)
    typer.echo(f"study {study!r} is {state}: budget {budget_text(run, entry.counted, now)}, priority {run.priority}")
