"""Optuna storages behind one URL: SQLite (one process), a journal file (several local processes),
PostgreSQL/MySQL (many hosts). Every command that takes --storage goes through open_storage."""
from __future__ import annotations

import glob
import os
import sqlite3
from urllib.parse import urlsplit

import optuna

from .errors import UserError

STUDIES_DIR = "studies"
JOURNAL_PREFIX = "journal:///"


def default_url(study: str) -> str:
    return f"sqlite:///{STUDIES_DIR}/{study}.db"


def local_path(url: str) -> str | None:
    """The file behind a SQLite or journal URL; None for a database server."""
    if url.startswith("sqlite:///"):
        return url[len("sqlite:///"):]
    if url.startswith(JOURNAL_PREFIX):
        return url[len(JOURNAL_PREFIX):]
    return None


def _server_hint(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname or 'localhost'}:{parts.port or 'default port'}"


def open_storage(url: str, heartbeat: bool = False) -> optuna.storages.BaseStorage:
    """Open (creating where it is a file) the storage at url, or raise a one-line UserError."""
    path = local_path(url)
    if path is not None:
        parent = os.path.dirname(path)
        try:
            if parent:
                os.makedirs(parent, exist_ok=True)
            if url.startswith(JOURNAL_PREFIX):
                from optuna.storages.journal import JournalFileBackend

                return optuna.storages.JournalStorage(JournalFileBackend(path))
            return _sqlite_storage(url, path)
        except (OSError, sqlite3.Error) as exc:
            raise UserError(f"--storage {url}: cannot open {path}: {exc}") from None
    scheme = url.split(":", 1)[0]
    if not scheme.startswith(("postgresql", "mysql")):
        raise UserError(f"--storage {url}: unknown kind; use sqlite:///FILE.db, {JOURNAL_PREFIX}FILE.log or postgresql+psycopg://user:pw@host:5432/db")
    # Heartbeats always on for database servers: a dead worker's trial is failed after the grace
    # period and retried once (tuner.cluster.heartbeat_options; TUNER_HEARTBEAT_INTERVAL/TUNER_GRACE_PERIOD).
    from .cluster import heartbeat_options

    kwargs = heartbeat_options()
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True}, **kwargs)
    except ModuleNotFoundError as exc:
        raise UserError(f"--storage {scheme}: driver missing ({exc.name}); pip install \"engine-tuner[postgres]\"") from None
    except Exception as exc:  # SQLAlchemy's OperationalError and friends: say where and what to check
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"--storage: cannot reach the database at {_server_hint(url)} ({first}); "
                        "check that the server runs, the host and port, the user, password and database name") from None


def _sqlite_storage(url: str, path: str) -> optuna.storages.RDBStorage:
    """SQLite that holds up with several local processes on one study (tune --jobs, status, report).

    - WAL: readers never block the writer; it is a property of the file, so set once here.
    - BEGIN IMMEDIATE: every transaction takes the write lock up front and waits for it (timeout 60 s).
      With SQLite's default deferred transactions, two workers can both read an enqueued trial as
      WAITING and then fail to upgrade their stale snapshot ("database is locked"), since SQLite has
      no SELECT ... FOR UPDATE.
    - synchronous=NORMAL: with WAL, a killed process still loses no committed trial; only a power cut
      can lose the last commits. FULL costs an fsync per suggested parameter (~10 ms each here).
    """
    from sqlalchemy import event

    with sqlite3.connect(path, timeout=60) as con:
        con.execute("PRAGMA journal_mode=WAL")
    storage = optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 60, "isolation_level": None}})
    engine = storage.engine

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_con, _record):
        dbapi_con.execute("PRAGMA synchronous=NORMAL")

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # connections opened before the listeners existed
    return storage


def local_storage_urls() -> list[str]:
    """The default storages of this directory: one SQLite file per study under studies/."""
    return [f"sqlite:///{p}" for p in sorted(glob.glob(os.path.join(STUDIES_DIR, "*.db")))]
