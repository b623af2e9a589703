"""Where studies live: storage URLs, the checks made before anything is written, and opening
a storage for a search.

Default: one SQLite file per study under studies/ (or $EAS_STUDIES_DIR). SQLite is hardened
for a few local workers (WAL journal, 60 s busy timeout); PostgreSQL is the choice for many
workers on many machines. Heartbeats let a surviving worker fail and retry a dead one's trial.
Readers never come here: they read with SQL and never write (see reader.py).
"""

from __future__ import annotations

import os
import re
import sqlite3
import warnings
from pathlib import Path

from eas.errors import UserError
from eas.lazy import lazy_import

optuna = lazy_import("optuna")
sqlalchemy_engine = lazy_import("sqlalchemy.engine")
sqlalchemy_exc = lazy_import("sqlalchemy.exc")

STUDY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
STORAGE_ENV = "EAS_STORAGE"  # the storage URL, so a password need not be on a command line
# Tables that only an Optuna storage has; a SQLite file with tables but none of these belongs
# to another application and is never written to.
OPTUNA_TABLES = {"studies", "trials", "version_info", "alembic_version"}


def studies_dir() -> Path:
    return Path(os.environ.get("EAS_STUDIES_DIR", "studies"))


def check_study_name(name: str) -> str:
    if not STUDY_NAME.match(name) or ".." in name:
        raise UserError(f"invalid study name {name!r}: use letters, digits, '.', '_' and '-' "
                        "(no path separators), starting with a letter or digit")
    return name


def default_url(study: str) -> str:
    return f"sqlite:///{studies_dir() / check_study_name(study)}.db"


def storage_url(given: str | None, study: str) -> str:
    """--storage, else $EAS_STORAGE, else the study's SQLite file under studies/."""
    return given or os.environ.get(STORAGE_ENV) or default_url(study)


def safe_url(url: str) -> str:
    """The URL with any password hidden, for messages, even when the URL is malformed."""
    try:
        return sqlalchemy_engine.make_url(url).render_as_string(hide_password=True)
    except Exception:
        return re.sub(r"(://[^/@]*?:)[^/@]*@", r"\1***@", url)


def sqlite_path(url: str) -> Path | None:
    if not url.startswith("sqlite:///"):
        return None
    path = url[len("sqlite:///"):].split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path)


def sqlite_tables(path: Path) -> set[str]:
    """Table names of a SQLite file, read without writing a byte (a corrupt file stays as it is)."""
    try:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
        try:
            return {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            connection.close()
    except sqlite3.DatabaseError as error:
        raise UserError(f"{path} is not a readable SQLite study file ({error}); it was left untouched") from None


def preflight(url: str, must_exist: bool = False) -> None:
    """Refuse a URL that cannot work, without writing anything: bad syntax, a file that is not
    a SQLite database or belongs to another application, or (for readers) a missing file."""
    try:
        sqlalchemy_engine.make_url(url)
    except (sqlalchemy_exc.ArgumentError, ValueError):
        raise UserError(f"not a storage URL: {safe_url(url)!r} (e.g. sqlite:///studies/x.db or "
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
    tables = sqlite_tables(path)
    if tables and not tables & OPTUNA_TABLES:
        raise UserError(f"{path} is a SQLite database of another application (tables: "
                        f"{', '.join(sorted(tables)[:5])}); EAS writes only to its own study files")


def first_line(error: BaseException) -> str:
    """An error's first line (a database driver's own message, not SQLAlchemy's wrapper), for a
    one-line refusal."""
    text = str(getattr(error, "orig", None) or error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def open_storage(url: str, heartbeat: int | None = None, retries: int = 2):
    """An Optuna RDBStorage for a search or worker; with `heartbeat` (seconds), stale trials of
    dead workers are failed after 3 missed beats and retried up to `retries` times."""
    # Heartbeats and metric names are marked experimental; EAS relies on them deliberately.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    preflight(url)
    path = sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    # A server's connections are shared by every worker: each holds at most 4 for writing
    # (the trial in hand and its heartbeat use 2) and 4 for reading (reader.py).
    engine_kwargs = {"connect_args": {"timeout": 60}} if path is not None else {
        "pool_pre_ping": True, "pool_size": 2, "max_overflow": 2}
    extra = {}
    if heartbeat:
        extra = dict(heartbeat_interval=heartbeat, grace_period=3 * heartbeat,
                     heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=retries))
    for attempt in range(3):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, **extra)
        except sqlalchemy_exc.IntegrityError:
            # Another process is creating the same new storage (Optuna's version rows): it wins,
            # and the next attempt finds the tables made.
            if attempt == 2:
                raise UserError(f"cannot open storage {safe_url(url)}: another process keeps creating it") from None
        except (sqlalchemy_exc.SQLAlchemyError, ImportError, ValueError) as error:
            raise UserError(f"cannot open storage {safe_url(url)}: {first_line(error)}") from None
    raise AssertionError("unreachable")


def harden_sqlite(storage) -> None:
    """WAL journal so readers (the explorer) never block the writers. Set only when a search
    really starts: it changes the file header, and bad input must leave files untouched."""
    engine = storage.engine
    if engine.url.get_backend_name() == "sqlite":
        with engine.connect() as connection:
            connection.exec_driver_sql("PRAGMA journal_mode=WAL")
