"""`eas studies` and `eas show`: read stored studies (never writing to them)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from eas.cli.options import JsonOption, StorageOption, StudyArgument, emit_json
from eas.errors import UserError


def studies_command(
    storage: StorageOption = None,
    backup: Annotated[Path | None, typer.Option("--backup", help="Copy each SQLite study file into this folder, "
                                                "complete and consistent even while a search writes to it.")] = None,
    as_json: JsonOption = False,
) -> None:
    """List studies with their pool state, budget and trial counts (default: studies/*.db).

    States: queued, running (N workers), stopped, done, or unqueued (no pool budget)."""
    from eas.reports.summary import study_rows
    from eas.study.reader import backup as backup_study
    from eas.study.reader import list_studies, storage_urls
    from eas.study.records import STATES
    from eas.units import table

    if backup is not None:
        for url in storage_urls(storage):
            typer.echo(f"backed up {backup_study(url, backup)}")
        return
    listed = list_studies(storage)
    for row in listed:
        if row["error"]:
            raise UserError(row["error"])
    rows = study_rows(listed, time.time())
    if as_json:
        emit_json(rows)
        return
    if not rows:
        typer.echo("no studies yet: run `eas search --space tiny --data digits --budget 1m`")
        return
    keys = ["study", "space", "data", "state", "budget", "priority", "trials",
            *[s for s in STATES if s not in ("waiting", "broken")]]
    typer.echo(table([[row[k] for k in keys] for row in rows], keys))


def show_command(
    study: StudyArgument,
    storage: StorageOption = None,
    trial: Annotated[int | None, typer.Option("--trial", help="Show one trial in full.")] = None,
    exports: Annotated[Path, typer.Option("--exports", help="With --trial: the folder tree searched for its "
                                          "exports and compressed models.")] = Path("."),
    as_json: JsonOption = False,
) -> None:
    """Print a study's Pareto set with its knee point, or one trial in full."""
    from eas.reports.front import (
        footprint,
        front_document,
        rank_agreement,
        rung_counts,
        time_split_total,
        trial_summary,
    )
    from eas.reports.summary import study_lines, verification_lines
    from eas.reports.time_to_beat import runtime_words, time_to_beat, time_to_beat_lines
    from eas.study.reader import StudyReader
    from eas.study.storage import check_study_name, default_url

    check_study_name(study)
    reader = StudyReader(storage or default_url(study), study)
    found = reader.loaded()
    settings, objectives, reference, records = found.settings, found.objectives, found.reference, found.records
    if trial is not None:
        match = [r for r in records if r.number == trial]
        if not match:
            raise UserError(f"study {study!r} has no trial {trial} (trials 0..{len(records) - 1})")
        record = match[0]
        from eas.reports.lineage import descendants

        emit_json({"trial": record.number, "state": record.state, "genome": record.genome, "reason": record.reason,
                   "params": reader.params(record), "metrics": record.metrics, "attributes": record.attrs,
                   "descendants": descendants(study, record.number, exports)})
        return
    beatings = time_to_beat(records, found.baselines)
    if as_json:
        spent = footprint(records, objectives, reference)
        emit_json({"study": study, "settings": settings, **front_document(records, objectives, reference),
                   "reference_point": reference, "rungs": rung_counts(records),
                   "rank_agreement": rank_agreement(records), "footprint": spent,
                   "time_split": time_split_total(records),
                   "verification": found.verification[-1] if found.verification else None,
                   "time_to_beat": [b.to_dict() for b in beatings],
                   "broken": [{"trial": r.number, "reason": r.reason} for r in records if r.state == "broken"],
                   "trials": [trial_summary(r) for r in records]})
        return
    typer.echo("\n".join(study_lines(study, settings, records, objectives, reference)))
    if beatings:
        typer.echo("\n" + "\n".join(time_to_beat_lines(beatings, runtime_words(settings))))
    if found.verification:
        typer.echo("\n" + "\n".join(verification_lines(found.verification[-1])))
