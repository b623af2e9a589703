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
from contextlib import closing
from pathlib import Path

from eas.application import quiet_optuna_if_asked
from eas.errors import UserError
from eas.lazy import lazy_import

optuna = lazy_import("optuna")
sqlalchemy_engine = lazy_import("sqlalchemy.engine")
sqlalchemy_exc = lazy_import("sqlalchemy.exc")

STUDY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
STORAGE_ENV = "EAS_STORAGE"  # the storage URL, so a password need not be on a command line
# Tables that only an Optuna storage has; a SQLite file with tables but none of these belongs
# to another application and is never written to.
# Optuna's own schema, the columns EAS reads from each table: a SQLite file holding anything
# else belongs to another application (and a look-alike with a `studies` table is not Optuna's).
OPTUNA_COLUMNS = {
    "version_info": {"version_info_id", "schema_version", "library_version"},
    "alembic_version": {"version_num"},
    "studies": {"study_id", "study_name"},
    "study_directions": {"study_direction_id", "direction", "study_id", "objective"},
    "study_user_attributes": {"study_user_attribute_id", "study_id", "key", "value_json"},
    "study_system_attributes": {"study_system_attribute_id", "study_id", "key", "value_json"},
    "trials": {"trial_id", "number", "study_id", "state", "datetime_start", "datetime_complete"},
    "trial_user_attributes": {"trial_user_attribute_id", "trial_id", "key", "value_json"},
    "trial_system_attributes": {"trial_system_attribute_id", "trial_id", "key", "value_json"},
    "trial_params": {"param_id", "trial_id", "param_name", "param_value", "distribution_json"},
    "trial_values": {"trial_value_id", "trial_id", "objective", "value"},
}
OPTIONAL_TABLES = {"trial_intermediate_values", "trial_heartbeats", "eas_rung_weights", "sqlite_sequence"}


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
    """The URL with any password hidden, for messages, whatever the URL's shape: everything
    between the user name and the last '@' (a password may hold '/', ':' or '@'), and any
    password=... parameter."""
    scheme, separator, rest = url.partition("://")
    if separator and "@" in rest:
        userinfo, _, host = rest.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        rest = f"{user}:***@{host}" if colon else f"{userinfo}@{host}"
    return re.sub(r"(?i)(password=)[^&]*", r"\1***", f"{scheme}{separator}{rest}")


def _secrets(url: str) -> list[str]:
    """The password of a URL and each piece of it a driver may echo: a malformed URL's driver
    error can name a "host" that is really the end of the password."""
    scheme, separator, rest = url.partition("://")
    found = re.findall(r"(?i)password=([^&]*)", url)
    if separator and "@" in rest:
        userinfo = rest.rpartition("@")[0]
        if ":" in userinfo:
            found.append(userinfo.partition(":")[2])
    pieces = {piece for secret in found for piece in [secret, *re.split(r"[@/:]", secret)] if len(piece) >= 3}
    return sorted(pieces, key=len, reverse=True)


def sqlite_path(url: str) -> Path | None:
    if not url.startswith("sqlite:///"):
        return None
    path = url[len("sqlite:///"):].split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path)


def sqlite_schema(path: Path) -> tuple[dict[str, set[str]], list]:
    """(table -> column names, rows of version_info) of a SQLite file, read without writing a
    byte (a corrupt file stays as it is)."""
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)) as connection:
            tables = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            columns = {table: {row[1] for row in connection.execute(f'PRAGMA table_info("{table}")')}
                       for table in tables}
            versions = connection.execute("SELECT schema_version FROM version_info").fetchall() \
                if "version_info" in tables else []
            return columns, versions
    except sqlite3.DatabaseError as error:
        raise UserError(f"{path} is not a readable SQLite study file ({error}); it was left untouched") from None


def foreign_schema(columns: dict[str, set[str]], versions: list) -> str | None:
    """Why a SQLite file's schema is not Optuna's (None when it is, or when the file is empty)."""
    if not columns:
        return None
    missing = [t for t, needed in OPTUNA_COLUMNS.items() if not needed <= columns.get(t, set())]
    if missing:
        return f"tables {', '.join(sorted(columns)[:5])} are not Optuna's ({missing[0]} missing or different)"
    extra = sorted(set(columns) - set(OPTUNA_COLUMNS) - OPTIONAL_TABLES)
    if extra:
        return f"it holds tables Optuna does not make ({', '.join(extra[:5])})"
    if len(versions) != 1 or not isinstance(versions[0][0], int):
        return "its version_info is not Optuna's"
    return None


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
    columns, versions = sqlite_schema(path)
    # Writers need Optuna's whole schema; readers, which never write, refuse only a file with
    # none of its tables (one being created by a search shows some of them for a moment).
    problem = foreign_schema(columns, versions) if not must_exist else \
        None if not columns or set(columns) & set(OPTUNA_COLUMNS) else "none of Optuna's tables"
    if problem:
        raise UserError(f"{path} is a SQLite database of another application ({problem}); EAS writes only to its "
                        "own study files and left it untouched")


def check_writable(path: Path) -> None:
    """A SQLite study that will be written: the file, its write-ahead log and its folder must take
    writes (a read-only or immutable file is refused in one line before anything starts)."""
    for target in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), path.parent):
        if target.exists() and not os.access(target, os.W_OK):
            raise UserError(f"cannot write {target}: it is read-only (the study is left as it is)")


def first_line(error: BaseException, url: str = "") -> str:
    """An error's first line (a database driver's own message, not SQLAlchemy's wrapper), for a
    one-line refusal; nothing of `url`'s password survives in it."""
    text = str(getattr(error, "orig", None) or error).strip()
    line = text.splitlines()[0] if text else type(error).__name__
    for secret in _secrets(url):
        line = line.replace(secret, "***")
    return line


def open_storage(url: str, heartbeat: int | None = None, retries: int = 2):
    """An Optuna RDBStorage for a search or worker; with `heartbeat` (seconds), stale trials of
    dead workers are failed after 3 missed beats and retried up to `retries` times."""
    # Heartbeats and metric names are marked experimental; EAS relies on them deliberately.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    quiet_optuna_if_asked()
    preflight(url)
    path = sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        check_writable(path)
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
            raise UserError(f"cannot open storage {safe_url(url)}: {first_line(error, url)}") from None
    raise AssertionError("unreachable")


def checkpoint_wal(url: str) -> None:
    """Fold a SQLite study's write-ahead log back into its file when a writer ends, so that the
    file alone holds every trial (users copy studies/<study>.db). Best effort: another worker
    still writing keeps its part of the log, and folds it in when it ends."""
    path = sqlite_path(url)
    if path is None or not path.is_file():
        return
    try:
        with closing(sqlite3.connect(path, timeout=10)) as connection:
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.Error:
        pass


def harden_sqlite(storage) -> None:
    """WAL journal so readers (the explorer) never block the writers. Set only when a search
    really starts: it changes the file header, and bad input must leave files untouched."""
    engine = storage.engine
    if engine.url.get_backend_name() == "sqlite":
        with engine.connect() as connection:
            connection.exec_driver_sql("PRAGMA journal_mode=WAL")
