"""Creating a study for a search, resuming one, and joining one as a worker.

A new study gets its metric names, the hypervolume reference point, the schema version and
provenance, the warm-start queue, and finally its settings: a study without settings is still
being set up, and readers and workers say so instead of joining it half made.
"""

from __future__ import annotations

from collections.abc import Callable

from eas.errors import UserError
from eas.lazy import lazy_import
from eas.objectives import OBJECTIVES
from eas.provenance import versions
from eas.study import schema
from eas.study.reader import NoSuchStudy, StudyReader
from eas.study.storage import harden_sqlite, open_storage, sqlite_path

optuna = lazy_import("optuna")


def check_resumable(url: str, name: str, settings: schema.SearchSettings) -> None:
    """Before anything is written: a stored study of that name must have the same settings
    (and a schema this EAS can read). Nothing is checked when it does not exist yet."""
    path = sqlite_path(url)
    if path is not None and not path.exists():
        return
    try:
        reader = StudyReader(url, name)
    except NoSuchStudy:
        return
    different = settings.mismatches(schema.SearchSettings.from_dict(reader.settings, name))
    if different:
        raise UserError(f"study {name!r} exists with different {', '.join(different)}; "
                        "use another --study name, or the same settings to resume it")
    reader.check_optuna_can_load()


def create_or_resume(storage, name: str, settings: schema.SearchSettings, reference: Callable[[], dict],
                     warm_start: Callable[[object], None] | None = None):
    """(study, created): a new study with `settings`, or the stored one when its settings match."""
    directions = [OBJECTIVES[o].direction for o in settings.objectives]
    study = optuna.create_study(study_name=name, storage=storage, directions=directions, load_if_exists=True)
    stored = study.user_attrs.get(schema.SETTINGS)
    if stored is not None:
        schema.check_schema(study.user_attrs.get(schema.SCHEMA), name)
        different = settings.mismatches(schema.SearchSettings.from_dict(stored, name))
        if different:
            raise UserError(f"study {name!r} exists with different {', '.join(different)}; "
                            "use another --study name, or the same settings to resume it")
        return study, False
    if [d.name.lower() for d in study.directions] != directions:
        raise UserError(f"study {name!r} exists and is not an EAS study with these objectives")
    try:
        study.set_metric_names(list(settings.objectives))
        study.set_user_attr(schema.REFERENCE, reference())
        study.set_user_attr(schema.SCHEMA, schema.SCHEMA_VERSION)
        study.set_user_attr(schema.CREATED_BY, versions())
        if warm_start is not None:
            warm_start(study)
        study.set_user_attr(schema.SETTINGS, settings.to_dict())  # last: the study is now ready
    except BaseException:  # an error or Ctrl-C while setting up: no half-made study poisons the name
        _remove_half_made(storage, name)
        raise
    return study, True


def _remove_half_made(storage, name: str) -> None:
    """Delete a study that never got its settings and holds no trial (best effort: another
    process that finished setting it up meanwhile keeps it)."""
    try:
        study = optuna.load_study(study_name=name, storage=storage)
        if schema.SETTINGS not in study.user_attrs and not study.get_trials(deepcopy=False):
            optuna.delete_study(study_name=name, storage=storage)
    except Exception:  # the original error is what the user must see
        pass


def join(url: str, name: str, heartbeat: int | None, storage=None):
    """(study, settings, reader, storage) of an existing EAS study, for a worker. Checked read-only
    first, so nothing is written to a storage that holds no such study. `storage`: one already opened."""
    reader = StudyReader(url, name)
    settings = schema.SearchSettings.from_dict(reader.settings, name)
    reader.check_optuna_can_load()
    if storage is None:
        storage = open_storage(url, heartbeat=heartbeat)
        harden_sqlite(storage)
    return optuna.load_study(study_name=name, storage=storage), settings, reader, storage
