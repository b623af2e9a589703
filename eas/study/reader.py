"""Reading stored studies with SQL on Optuna's tables: never a write, never a table created.

Optuna's RDBStorage inserts its version rows whenever they are missing, even with
skip_table_creation; a reader that opened a SQLite file while a search was creating it could
make either fail. Readers here open SQLite files read-only (`mode=ro`) and PostgreSQL sessions
with default_transaction_read_only, read only the tables they need, and say "still being
created" while a study is being set up. A `StudyReader` reads incrementally: each `poll()`
fetches only trials that are new or were unfinished at the last poll, so a long search or a
live explorer pays for what changed, not for the size of the study.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from eas.arch.bounds import check_classes, check_shape
from eas.errors import UserError
from eas.jsonfile import MAX_DEPTH, depth, may_nest_too_deeply, nested_too_deeply
from eas.lazy import lazy_import
from eas.study import schema
from eas.study.queue import COUNTED, QueuedStudy, Run
from eas.study.records import STATES, UNREADABLE, TrialRecord, baseline_records, make_record, state_of
from eas.study.storage import first_line, preflight, safe_url, sqlite_path, studies_dir

optuna_distributions = lazy_import("optuna.distributions")
optuna_storages = lazy_import("optuna.storages")
optuna_study = lazy_import("optuna.study")
sa = lazy_import("sqlalchemy")
sqlalchemy_exc = lazy_import("sqlalchemy.exc")

_ENGINES: dict[str, object] = {}


class NoSuchStudy(UserError):
    """The storage is readable and does not hold the study (yet)."""

FINISHED = ("COMPLETE", "PRUNED", "FAIL")


def storage_urls(storage: str | None = None) -> list[str]:
    """The given URL, or every SQLite study file under studies/ ($EAS_STUDIES_DIR)."""
    if storage:
        return [storage]
    return [f"sqlite:///{p}" for p in sorted(studies_dir().glob("*.db"))]


def backup(url: str, folder: Path) -> Path:
    """A consistent copy of a SQLite study file in `folder`, made with SQLite's backup API:
    safe while a search writes to it, and complete (the write-ahead log is read too)."""
    path = sqlite_path(url)
    if path is None:
        raise UserError(f"--backup copies SQLite study files; back up {safe_url(url)} with the server's own tools")
    preflight(url, must_exist=True)
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise UserError(f"--backup {folder} is not a folder: name a folder to copy the study files into")
    target = folder / path.name
    if target.exists() or target.resolve() == path.resolve():
        raise UserError(f"{target} exists: back up into another folder")
    partial = folder / f".{path.name}.partial-{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with (closing(sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True, timeout=30)) as source,
              closing(sqlite3.connect(partial)) as copy):
            source.backup(copy)
        os.rename(partial, target)  # a backup in place is whole; a failed one leaves nothing
    except (sqlite3.Error, OSError) as error:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        raise UserError(f"cannot back up {path} into {folder}: {getattr(error, 'strerror', None) or error}") from None
    return target


def readonly_engine(url: str):
    """A SQLAlchemy engine that cannot write (one per URL and process)."""
    if url in _ENGINES:
        return _ENGINES[url]

    preflight(url, must_exist=True)
    path = sqlite_path(url)
    try:
        if path is not None:
            uri = f"file:{path.resolve()}?mode=ro"
            # NullPool: each read opens and closes its own connection in its own thread. The default pool
            # for this URL (one connection per thread, the others closed from whichever thread comes
            # next) made the explorer's threads log sqlite3.ProgrammingError tracebacks.
            engine = sa.create_engine("sqlite://", creator=lambda: sqlite3.connect(uri, uri=True, timeout=30),
                                      poolclass=sa.pool.NullPool)
        elif sa.engine.make_url(url).get_backend_name() == "postgresql":
            engine = sa.create_engine(url, pool_pre_ping=True, pool_size=2, max_overflow=2, connect_args={
                "options": "-c default_transaction_read_only=on", "connect_timeout": 10})
        else:
            engine = sa.create_engine(url, pool_pre_ping=True)
    except (ImportError, sqlalchemy_exc.SQLAlchemyError, ValueError) as error:
        raise UserError(f"cannot open storage {safe_url(url)}: {first_line(error, url)}") from None
    _ENGINES[url] = engine
    return engine


@contextmanager
def reading(url: str) -> Iterator[object]:
    """A read-only connection; every database error becomes one clear line."""
    engine = readonly_engine(url)
    try:
        with engine.connect() as connection:
            yield connection
    except sqlalchemy_exc.SQLAlchemyError as error:
        text = first_line(error, url)
        if "no such table" in text or "does not exist" in text and "relation" in text:
            raise NoSuchStudy(f"storage {safe_url(url)} has no EAS studies yet (still being created, "
                            "or not an Optuna storage)") from None
        raise UserError(f"cannot open storage {safe_url(url)}: {text}") from None


NEEDED_TABLES = {"studies", "study_user_attributes", "trials", "trial_user_attributes", "trial_system_attributes",
                 "trial_params"}


# The one door to Optuna's private tables: EAS reads them with SQL (fast, and without Optuna's
# writes on read) at the storage layout it was checked against; a study of another layout is read
# through Optuna's public API instead (StudyReader), and the SQL-only listings refuse it.
OPTUNA_SCHEMA_VERSIONS = {12}


def _check_tables(connection, url: str) -> bool:
    """A storage whose tables are not all there yet is being created (or is not Optuna's):
    NoSuchStudy. Otherwise whether its Optuna layout is the one EAS's SQL reads."""
    tables = set(sa.inspect(connection).get_table_names())
    if NEEDED_TABLES - tables:
        raise NoSuchStudy(f"storage {safe_url(url)} has no EAS studies yet (still being created, "
                          "or not an Optuna storage)")
    row = connection.execute(sa.text("SELECT schema_version, library_version FROM version_info")).first() \
        if "version_info" in tables else None
    return row is None or row[0] in OPTUNA_SCHEMA_VERSIONS


def _refuse_other_layout(connection, url: str) -> None:
    """For the listings that only SQL gives in a few queries."""
    if not _check_tables(connection, url):
        row = connection.execute(sa.text("SELECT schema_version, library_version FROM version_info")).first()
        raise UserError(f"storage {safe_url(url)} has Optuna's storage layout {row[0]} (written by Optuna {row[1]}); "
                        f"this EAS lists layout {', '.join(map(str, sorted(OPTUNA_SCHEMA_VERSIONS)))}: open its "
                        "studies by name (eas show NAME), or use the Optuna version that wrote it")


def _json(text):
    """A stored value, or the readers' mark for one that is not JSON or is nested beyond MAX_DEPTH."""
    try:
        value = json.loads(text) if text is not None else None
    except (ValueError, TypeError, RecursionError):
        return {UNREADABLE: str(text)[:80]}
    if isinstance(text, str) and may_nest_too_deeply(text) and depth(value) > MAX_DEPTH:
        return {UNREADABLE: nested_too_deeply("a stored value")}
    return value


def _date_text(seconds: float | None) -> str:
    """A start time as the listing shows it (local time); "" for none, or for a planted date
    the local calendar cannot show (year 1 in UTC is year 0 east of Greenwich)."""
    try:
        return datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M") if seconds and math.isfinite(seconds) \
            else ""
    except (ValueError, OverflowError, OSError):
        return ""


def _not_json(text) -> bool:
    parsed = _json(text)
    return isinstance(parsed, dict) and UNREADABLE in parsed


def _timestamp(value) -> float | None:
    """Optuna stores naive UTC datetimes; SQLite returns them as text. What is not a date (anyone
    can write a shared study) is NaN, which makes its trial broken."""
    if value is None:
        return None
    try:
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        return value.replace(tzinfo=timezone.utc).timestamp()
    except (ValueError, TypeError, AttributeError, OverflowError, OSError):
        return math.nan


def _study_attrs(connection, study_id: int) -> dict:
    rows = connection.execute(sa.text("SELECT key, value_json FROM study_user_attributes WHERE study_id = :s"),
                              {"s": study_id})
    return {key: _json(value) for key, value in rows}


def _state_counts(connection) -> dict[int, dict[str, int]]:
    """Study id -> trials per EAS state, counted by SQL (Optuna's state and EAS's status), so a
    listing costs one query whatever the studies' sizes. Broken trials are found only when a
    study is read in full (eas show), which validates every trial."""
    counts: dict[int, dict[str, int]] = {}
    for study_id, state, status, n in connection.execute(sa.text(
            f"SELECT t.study_id, t.state, a.value_json, COUNT(*) FROM trials t LEFT JOIN trial_user_attributes a "
            f"ON a.trial_id = t.trial_id AND a.key = '{schema.STATUS}' GROUP BY t.study_id, t.state, a.value_json")):
        row = counts.setdefault(study_id, dict.fromkeys(STATES, 0))
        row[state_of(getattr(state, "name", state), _json(status), violated=False)] += n
    return counts


def _running_workers(connection) -> dict[int, set[str]]:
    """Study id -> host:pid of the workers running one of its trials now."""
    workers: dict[int, set[str]] = {}
    for study_id, worker in connection.execute(sa.text(
            f"SELECT t.study_id, a.value_json FROM trials t JOIN trial_user_attributes a ON a.trial_id = t.trial_id "
            f"WHERE t.state = 'RUNNING' AND a.key = '{schema.WORKER}'")):
        workers.setdefault(study_id, set()).add(str(_json(worker)))
    return workers


def _by_state(counts: dict, study_id: int) -> dict[str, int]:
    return counts.get(study_id) or dict.fromkeys(STATES, 0)


def _queued(study_id: int, name: str, attrs: dict, by_state: dict[str, int], workers: dict):
    run, problem = Run.from_attrs(attrs)
    return QueuedStudy(study_id, name, run, problem, sum(by_state[s] for s in COUNTED),
                       frozenset(workers.get(study_id, ())))


def queue_entries(url: str) -> list:
    """The pool's view of one storage: a QueuedStudy per EAS study, from the run attributes, the
    trial counts and the running workers only (not the settings), in four queries whatever the
    number of studies and trials: what a pool worker reads before every trial. (No table check
    first: `reading` turns a missing table into NoSuchStudy.)"""
    with reading(url) as connection:
        found = connection.execute(sa.text(
            "SELECT s.study_id, s.study_name FROM studies s WHERE EXISTS (SELECT 1 FROM study_user_attributes a "
            "WHERE a.study_id = s.study_id AND a.key = :k) ORDER BY s.study_id"), {"k": schema.SETTINGS}).all()
        attrs: dict[int, dict] = {study_id: {} for study_id, _ in found}
        for study_id, key, value in connection.execute(sa.text(
                "SELECT study_id, key, value_json FROM study_user_attributes WHERE key IN :keys").bindparams(
                sa.bindparam("keys", expanding=True)), {"keys": list(schema.RUN_KEYS)}):
            if study_id in attrs:
                attrs[study_id][key] = _json(value)
        counts, workers = _state_counts(connection), _running_workers(connection)
    return [_queued(study_id, name, attrs[study_id], _by_state(counts, study_id), workers) for study_id, name in found]


def entry_of(url: str, name: str) -> QueuedStudy:
    """The study's queue entry, read-only; a missing study is a clear error."""
    for _ in range(2):  # once more if the study was created between the two reads
        for entry in queue_entries(url):
            if entry.name == name:
                return entry
        StudyReader(url, name)  # says which studies exist, or that this one is not an EAS study
    raise UserError(f"study {name!r} is still being created; try again")


def list_studies(storage: str | None = None) -> list[dict]:
    """One row per study of each storage: EAS studies with their settings, trial counts and pool
    state (eas.study.queue), others left out; a storage that cannot be read is one row with its
    error. A few queries per storage, whatever the number of trials."""

    rows = []
    for url in storage_urls(storage):
        try:
            with reading(url) as connection:
                _refuse_other_layout(connection, url)
                found = connection.execute(sa.text(
                    "SELECT s.study_id, s.study_name, COUNT(t.trial_id), MIN(t.datetime_start) FROM studies s "
                    "LEFT JOIN trials t ON t.study_id = s.study_id GROUP BY s.study_id, s.study_name "
                    "ORDER BY s.study_id")).all()
                attrs = {study_id: _study_attrs(connection, study_id) for study_id, *_ in found}
                counts, workers = _state_counts(connection), _running_workers(connection)
        except UserError as error:
            rows.append({"study": None, "storage": safe_url(url), "url": url, "error": str(error)})
            continue
        for study_id, name, trials, started in found:
            settings = attrs[study_id].get(schema.SETTINGS)
            if settings is None:
                continue  # not an EAS study, or still being set up
            try:
                schema.SearchSettings.from_dict(settings, name)
                malformed = None
            except UserError as error:
                settings, malformed = {}, str(error)
            begun = _timestamp(started)
            rows.append({
                "study": name, "space": str(settings.get("space_name")), "data": str(settings.get("data")),
                "trials": trials, "objectives": ", ".join(map(str, settings.get("objectives") or [])),
                "started": _date_text(begun), "started_at": begun if begun and math.isfinite(begun) else None,
                "storage": safe_url(url), "url": url, "error": None, "malformed": malformed,
                "counts": _by_state(counts, study_id),
                "queue": _queued(study_id, name, attrs[study_id], _by_state(counts, study_id), workers),
            })
    return rows


@dataclass(frozen=True)
class LoadedStudy:
    name: str
    url: str
    settings: dict
    reference: dict
    records: list[TrialRecord]
    schema_version: int = schema.SCHEMA_VERSION
    verification: list = field(default_factory=list)  # what `eas verify` found, newest last
    baselines: dict = field(default_factory=dict)  # name -> BaselineRecord (eas search --baselines)

    @property
    def objectives(self) -> tuple[str, ...]:
        return tuple(self.settings["objectives"])

    @property
    def task(self) -> tuple[tuple[int, int, int], int] | None:
        shape, classes = self.settings.get("input_shape"), self.settings.get("num_classes")
        return (tuple(shape), classes) if shape and classes else None


class StudyReader:
    """One stored EAS study, read incrementally and never written."""

    def __init__(self, url: str, name: str):
        self.url, self.name = url, name
        self._lock = threading.Lock()  # the explorer shares one reader between sessions
        with reading(url) as connection:
            self._optuna = None if _check_tables(connection, url) else _public_api(url, name)
            row = connection.execute(sa.text("SELECT study_id FROM studies WHERE study_name = :n"), {"n": name}).first()
            if row is None:
                known = connection.execute(sa.text("SELECT study_name FROM studies ORDER BY study_id")).scalars().all()
                raise NoSuchStudy(f"no study {name!r} in {safe_url(url)} (studies: {', '.join(known) or 'none'})")
            self.study_id = row[0]
            attrs = _study_attrs(connection, self.study_id) if self._optuna is None else self._optuna.user_attrs
        if schema.SETTINGS not in attrs:
            raise UserError(f"study {name!r} is not an EAS study (or is still being created)")
        self.schema_version = schema.check_schema(attrs.get(schema.SCHEMA), name)
        settings = schema.SearchSettings.from_dict(attrs[schema.SETTINGS], name)  # validates
        self.settings = attrs[schema.SETTINGS]
        verification = attrs.get(schema.VERIFICATION)
        self.verification = [v for v in verification if schema.valid_verification(v)] \
            if isinstance(verification, list) else []
        reference = attrs.get(schema.REFERENCE)
        self.reference = {k: float(v) for k, v in reference.items() if isinstance(v, (int, float))} \
            if isinstance(reference, dict) else {}
        self.task = None
        if settings.input_shape is not None and settings.num_classes is not None:
            self.task = (check_shape(settings.input_shape, f"study {name!r}: stored input shape"),
                         check_classes(settings.num_classes, f"study {name!r}: stored number of classes"))
        self.records: dict[int, TrialRecord] = {}
        self._max_id = 0
        self._unfinished: set[int] = set()

    def poll(self) -> list[TrialRecord]:
        """Read the trials that are new or were unfinished last time; returns those records."""
        with self._lock:
            return self._poll()

    def _poll(self) -> list[TrialRecord]:
        if self._optuna is not None:
            return self._poll_public()
        where = "t.study_id = :s AND (t.trial_id > :m OR t.trial_id IN :u)"
        bound = {"s": self.study_id, "m": self._max_id, "u": sorted(self._unfinished) or [-1]}

        def query(sql: str):
            return connection.execute(sa.text(sql).bindparams(sa.bindparam("u", expanding=True)), bound)

        with reading(self.url) as connection:
            trials = query(f"SELECT t.trial_id, t.number, t.state, t.datetime_start, t.datetime_complete "
                           f"FROM trials t WHERE {where}").all()
            if not trials:
                return []
            attrs: dict[int, dict] = {}
            keys = ", ".join(f"'{k}'" for k in schema.TRIAL_KEYS)
            for trial_id, key, value in query(
                    f"SELECT a.trial_id, a.key, a.value_json FROM trial_user_attributes a JOIN trials t "
                    f"ON t.trial_id = a.trial_id WHERE {where} AND a.key IN ({keys})"):
                attrs.setdefault(trial_id, {})[key] = _json(value)
            constraints: dict[int, dict] = {}
            for trial_id, key, value in query(
                    f"SELECT a.trial_id, a.key, a.value_json FROM trial_system_attributes a JOIN trials t "
                    f"ON t.trial_id = a.trial_id WHERE {where} AND a.key LIKE 'constraints:%'"):
                constraints.setdefault(trial_id, {})[key.split(":", 1)[1]] = _json(value)
        changed = []
        for trial_id, number, state, started, finished in trials:
            state = getattr(state, "name", state)
            record = make_record(trial_id, number, state, _timestamp(started), _timestamp(finished),
                                 attrs.get(trial_id, {}), constraints.get(trial_id, {}), self.task)
            self.records[number] = record
            changed.append(record)
            self._max_id = max(self._max_id, trial_id)
            if state in FINISHED:
                self._unfinished.discard(trial_id)
            else:
                self._unfinished.add(trial_id)
        return changed

    def _poll_public(self) -> list[TrialRecord]:
        """The same records through Optuna's public API (a storage layout EAS's SQL was not checked
        against): every trial read again each time, so slower, never misread."""
        changed = []
        for trial in self._optuna.get_trials(deepcopy=False):
            attrs = {k: v for k, v in trial.user_attrs.items() if k in schema.TRIAL_KEYS}
            constraints = {k.split(":", 1)[1]: v for k, v in trial.system_attrs.items() if k.startswith("constraints:")}
            record = make_record(trial._trial_id, trial.number, trial.state.name, _timestamp(trial.datetime_start),
                                 _timestamp(trial.datetime_complete), attrs, constraints, self.task)
            if self.records.get(trial.number) != record:
                self.records[trial.number] = record
                changed.append(record)
        return changed

    def check_optuna_can_load(self) -> None:
        """Refuse, in one line, a study that Optuna itself could not load: a worker or a resumed
        search would end in a traceback inside Optuna at its first trial. Anyone with access to
        a shared study can store an attribute that is not JSON."""
        with reading(self.url) as connection:
            rows = connection.execute(sa.text(" UNION ALL ".join(
                f"SELECT t.number, a.key, a.value_json FROM {table} a JOIN trials t ON t.trial_id = a.trial_id "
                f"WHERE t.study_id = :s" for table in ("trial_user_attributes", "trial_system_attributes"))),
                {"s": self.study_id}).all()
            dates = connection.execute(sa.text("SELECT number, datetime_start, datetime_complete FROM trials "
                                               "WHERE study_id = :s"), {"s": self.study_id}).all()
        bad = [f"trial {number}: {key}" for number, key, value in rows if _not_json(value)]
        if bad:
            raise UserError(f"study {self.name!r} holds attributes that are not JSON or nest deeper than {MAX_DEPTH} "
                            f"levels ({', '.join(bad[:3])}); Optuna cannot load such a study: delete those trials' "
                            "attribute rows first")
        garbled = [f"trial {number}" for number, *when in dates
                   if any(value is not None and math.isnan(_timestamp(value) or 0.0) for value in when)]
        if garbled:
            raise UserError(f"study {self.name!r} holds dates that are not dates ({', '.join(garbled[:3])}); Optuna "
                            "cannot load such a study: fix or delete those trials first")

    def loaded(self) -> LoadedStudy:
        self.poll()
        with self._lock:
            records = [self.records[n] for n in sorted(self.records)]
        return LoadedStudy(self.name, self.url, self.settings, self.reference, records, self.schema_version,
                           self.verification, self.baselines())

    def baselines(self) -> dict:
        """The baselines stored so far (read again each time: a search stores them as they finish)."""
        if self._optuna is not None:
            attrs = self._optuna.user_attrs
        else:
            with reading(self.url) as connection:
                attrs = _study_attrs(connection, self.study_id)
        return baseline_records(attrs, self.task)

    def params(self, record: TrialRecord) -> dict:
        """The sampled parameters of one trial, in their external form."""
        if self._optuna is not None:
            return dict(self._optuna.get_trials(deepcopy=False)[record.number].params)
        with reading(self.url) as connection:
            rows = connection.execute(sa.text("SELECT param_name, param_value, distribution_json FROM trial_params "
                                           "WHERE trial_id = :t ORDER BY param_id"), {"t": record.trial_id}).all()
        params = {}
        for name, value, distribution in rows:
            try:
                params[name] = optuna_distributions.json_to_distribution(distribution).to_external_repr(value)
            except Exception:  # a planted row: show what is stored rather than fail
                params[name] = value
        return params


def _public_api(url: str, name: str):
    """The study through Optuna's own storage classes, for reading only (its layout check off:
    the tables are read as they are)."""
    storage = optuna_storages.RDBStorage(url, skip_table_creation=True, skip_compatibility_check=True)
    return optuna_study.load_study(study_name=name, storage=storage)


def load_study(url: str, name: str) -> LoadedStudy:
    """Every trial of a stored EAS study, read-only."""
    return StudyReader(url, name).loaded()
