"""Study storage: a SQLAlchemy URL -> Optuna RDBStorage, checked before anything is written.

Default: one SQLite file per study under studies/ (or $EAS_STUDIES_DIR). SQLite is hardened
for a few local workers (WAL journal, 60 s busy timeout); PostgreSQL is the choice for many
workers on many machines. Heartbeats let a surviving worker fail and retry a dead one's trial.
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

from eas.errors import UserError

STUDY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def studies_dir() -> Path:
    return Path(os.environ.get("EAS_STUDIES_DIR", "studies"))


def check_study_name(name: str) -> str:
    if not STUDY_NAME.match(name) or ".." in name:
        raise UserError(f"invalid study name {name!r}: use letters, digits, '.', '_' and '-' "
                        "(no path separators), starting with a letter or digit")
    return name


def default_url(study: str) -> str:
    return f"sqlite:///{studies_dir() / check_study_name(study)}.db"


def safe_url(url: str) -> str:
    """The URL with any password hidden, for messages."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url


def sqlite_path(url: str) -> Path | None:
    if not url.startswith("sqlite:///"):
        return None
    path = url[len("sqlite:///"):]
    return None if path in ("", ":memory:") else Path(path)


def preflight(url: str, must_exist: bool = False) -> None:
    """Refuse a URL that cannot work, without writing anything: bad syntax, an unreachable
    server, a file that is not a SQLite database, or (for readers) a file that is missing."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        make_url(url)
    except ArgumentError:
        raise UserError(f"not a storage URL: {url!r} (e.g. sqlite:///studies/x.db or "
                        "postgresql://user@host/db)") from None
    path = sqlite_path(url)
    if path is None:
        return
    if not path.exists():
        if must_exist:
            raise UserError(f"no study storage at {path}")
        if not path.parent.exists() and path.parent != studies_dir():
            raise UserError(f"folder {path.parent} does not exist")
        return
    try:
        # Read-only: a corrupt file must stay exactly as it is.
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
            connection.execute("SELECT name FROM sqlite_master LIMIT 1").fetchall()
        connection.close()
    except sqlite3.DatabaseError as error:
        raise UserError(f"{path} is not a readable SQLite study file ({error}); it was left untouched") from None


def open_storage(url: str, heartbeat: int | None = None, retries: int = 2, must_exist: bool = False):
    """An Optuna RDBStorage for `url`; with `heartbeat` (seconds), stale trials of dead workers
    are failed after 3 missed beats and retried up to `retries` times."""
    import warnings

    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    # Heartbeats and metric names are marked experimental; EAS relies on them deliberately.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    preflight(url, must_exist=must_exist)
    path = sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    engine_kwargs = {"connect_args": {"timeout": 60}} if path is not None else {"pool_pre_ping": True}
    extra = {}
    if heartbeat:
        extra = dict(heartbeat_interval=heartbeat, grace_period=3 * heartbeat,
                     heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=retries))
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, **extra)
    except (SQLAlchemyError, ImportError, ValueError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UserError(f"cannot open storage {safe_url(url)}: {first}") from None


def harden_sqlite(storage) -> None:
    """WAL journal so readers (the explorer) never block the writers. Set only when a search
    really starts: it changes the file header, and bad input must leave files untouched."""
    engine = storage.engine
    if engine.url.get_backend_name() == "sqlite":
        with engine.connect() as connection:
            connection.exec_driver_sql("PRAGMA journal_mode=WAL")
