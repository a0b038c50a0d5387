"""Optuna storages behind one URL: SQLite (one process), a journal file (several local processes),
PostgreSQL/MySQL (many hosts), a `tuner proxy` in front of one (grpc://HOST:PORT: hundreds of workers,
one process holding the database connections; tuner.run.proxy). Every command that takes --storage goes
through open_storage; commands that only read open with create=False, which never makes a file or a table.
Heartbeats (a dead worker's trial is failed and retried) and `tuner migrate` live here too."""
from __future__ import annotations

import glob
import json
import os
import re
import sqlite3
import warnings
from urllib.parse import urlsplit

import optuna

from ..errors import UserError
from .locks import directory_lock
from .optuna_private import inner_storage, journal_file, rdb_tables
from .proxy_client import GRPC_PREFIX, open_proxy

STUDIES_DIR = "studies"
DEMO_DIR = "tuner-demo"  # `tuner demo` keeps its study here; `tuner studies` looks in both
JOURNAL_PREFIX = "journal:///"
HEARTBEAT_ENV = "TUNER_HEARTBEAT_INTERVAL"
GRACE_ENV = "TUNER_GRACE_PERIOD"


STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_study_name(name: str) -> str:
    """A study name is also a file name (studies/NAME.db, NAME-engines/): no path separators, no
    leading dot, nothing that could leave studies/."""
    if not isinstance(name, str) or not STUDY_NAME.fullmatch(name):
        raise UserError(f"--study {name!r}: a study name is up to 100 letters, digits, '.', '_' and '-', "
                        "starting with a letter or digit (no '/', no '..'), e.g. bert-int8")
    return name


class StorageURL(str):
    """A study's storage URL, knowing what engine-tuner reads from it: the file behind it (SQLite or a journal;
    None for a database server or a proxy), whether it is a `tuner proxy`, and the lock files a local study's
    runs and claims hold beside its file. A str, so it goes wherever Optuna or SQLAlchemy take a URL."""

    __slots__ = ()

    @property
    def path(self) -> str | None:
        """The file behind a SQLite or journal URL; None for a database server or a proxy."""
        for prefix in ("sqlite:///", JOURNAL_PREFIX):
            if self.startswith(prefix):
                return self[len(prefix):]
        return None

    @property
    def is_journal(self) -> bool:
        return self.startswith(JOURNAL_PREFIX)

    @property
    def is_proxy(self) -> bool:
        return self.startswith(GRPC_PREFIX)

    def run_lock(self, study: str) -> str | None:
        """The file a process tuning `study` holds locked (tuner.run.tune.study_run_lock); None for a server."""
        return f"{self.path}.{study}.lock" if self.path is not None else None

    def claim_lock(self, study: str) -> str | None:
        """The file a worker claiming one of `study`'s budgeted trials holds (tuner.run.claims); None for a server."""
        return f"{self.path}.{study}.claim.lock" if self.path is not None else None


def default_url(study: str) -> StorageURL:
    return StorageURL(f"sqlite:///{STUDIES_DIR}/{check_study_name(study)}.db")


def study_url(study: str, storage: str | optuna.storages.BaseStorage | None = None) -> StorageURL:
    """Where a study lives: the storage given (a URL, or an Optuna storage object the Python API was handed),
    else studies/STUDY.db. An object is reopened by its URL, as every worker and trial child reopens it, with
    engine-tuner's own settings (heartbeats, SQLite's WAL and write lock: open_storage)."""
    if storage is None or storage == "":
        return default_url(study)
    if isinstance(storage, str):
        return StorageURL(storage)
    if isinstance(storage, optuna.storages.BaseStorage):
        url = url_of(storage)
        if url is None:
            raise UserError(f"storage={type(storage).__name__}: engine-tuner's workers and trial children reopen a "
                            "study by its URL, and this storage has none; pass an RDBStorage (sqlite:///FILE.db, "
                            f"postgresql+psycopg://...), a JournalStorage on a file, or the URL itself")
        return StorageURL(url)
    raise UserError(f"storage={storage!r}: give a URL (sqlite:///FILE.db, {JOURNAL_PREFIX}FILE.log, "
                    "postgresql+psycopg://user:pw@host:5432/db) or an Optuna storage object")


def url_of(storage: optuna.storages.BaseStorage) -> str | None:
    """The URL of an Optuna storage object: an RDBStorage's (under Optuna's cache too), a journal file's as
    journal:///PATH; None where no URL names it (in memory, Redis, a gRPC proxy's client)."""
    url = getattr(inner_storage(storage), "url", None)
    if isinstance(url, str):
        if url.startswith("sqlite:///"):
            url = url.split("?", 1)[0]  # SQLite's query options: open_storage sets its own
            return None if url == "sqlite:///:memory:" else url
        return url
    path = journal_file(storage)
    return JOURNAL_PREFIX + path if isinstance(path, str) else None


def _server_hint(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname or 'localhost'}:{parts.port or 'default port'}"


def stale_trial_callback() -> optuna.storages.RetryHeartbeatStaleTrialCallback:
    """What fail_stale_trials does with a trial whose heartbeats stopped: fail it and queue its config once
    more. The one callback of every storage with heartbeats: database servers and `tuner proxy` workers."""
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # heartbeats are "experimental"
    return optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1)


def heartbeat_options() -> dict:
    """RDBStorage keyword arguments: heartbeats every TUNER_HEARTBEAT_INTERVAL s (default 30), a
    trial is stale after TUNER_GRACE_PERIOD s without one (default 120), and is then retried once."""
    try:
        interval = int(os.environ.get(HEARTBEAT_ENV, "30"))
        grace = int(os.environ.get(GRACE_ENV, str(max(120, 4 * interval))))
    except ValueError:
        raise UserError(f"{HEARTBEAT_ENV} and {GRACE_ENV} take whole seconds") from None
    if interval < 1 or grace <= interval:
        raise UserError(f"{HEARTBEAT_ENV}={interval}, {GRACE_ENV}={grace}: need 1 <= interval < grace period")
    return {"heartbeat_interval": interval, "grace_period": grace, "heartbeat_stale_trial_callback": stale_trial_callback()}


def _sqlite_tables(path: str) -> set[str] | None:
    """The tables of a SQLite file, read-only; None where it is not a SQLite database."""
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            con.close()
    except sqlite3.Error:
        return None


def _has_optuna_schema(path: str) -> bool:
    return {"studies", "trials", "version_info"} <= (_sqlite_tables(path) or set())


def _optuna_schema_done(path: str) -> bool:
    """Optuna's schema made to the end: its tables, and the alembic revision RDBStorage stamps after them. A
    process that opens the file between the two stamps it too, and one of the two fails on alembic_version's
    unique key (a reader polling a study being created, under load)."""
    if not _has_optuna_schema(path):
        return False
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return con.execute("SELECT COUNT(*) FROM alembic_version").fetchone()[0] > 0
        finally:
            con.close()
    except sqlite3.Error:  # no alembic_version table yet
        return False


def holds_no_study(path: str) -> bool:
    """A SQLite or journal file with no study in it (an empty journal, or no row in Optuna's studies table)."""
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return True
    tables = _sqlite_tables(path)
    if tables is None:  # not SQLite: a journal with lines has a study
        return False
    if "studies" not in tables:  # a SQLite file with no tables yet
        return True
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute("SELECT COUNT(*) FROM studies").fetchone()[0] == 0
    finally:
        con.close()


def _optuna_tables() -> set[str]:
    return rdb_tables() | {"alembic_version"}  # alembic: Optuna's schema migrations


def _check_not_foreign(url: StorageURL, path: str, flag: str) -> None:
    """A file that exists and holds anything but Optuna's data is the user's own: never add tables or lines
    to it (a new study gets a new file)."""
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return
    if url.is_journal:
        with open(path, "rb") as f:
            first = f.readline(1 << 20)
        try:
            ours = "op_code" in json.loads(first)  # every line of Optuna's journal is one JSON log entry
        except (ValueError, TypeError):
            ours = False
        if not ours:
            raise UserError(f"{flag} {url}: {path} is not an Optuna journal; give a new file, e.g. "
                            f"{JOURNAL_PREFIX}studies.log; nothing was changed")
        return
    tables = _sqlite_tables(path)
    foreign = None if tables is None else sorted(t for t in tables - _optuna_tables() if not t.startswith("sqlite_"))
    if tables is None or foreign:
        what = "not a SQLite database" if tables is None else f"holds tables that are not Optuna's ({', '.join(foreign[:5])})"
        raise UserError(f"{flag} {url}: {path} {what}; give a file of its own for the studies, e.g. "
                        f"sqlite:///studies.db; nothing was changed")


def open_storage(url: str, create: bool = True, flag: str = "--storage") -> optuna.storages.BaseStorage:
    """Open the storage at url, or raise a one-line UserError naming `flag`. create=False (commands that
    read, or write only into an existing study) refuses a missing file and a file or database that is
    not Optuna's, and creates no table."""
    url = StorageURL(url)
    path = url.path
    if path is not None:
        if not create:
            _check_study_file(url, path, flag)
        _check_not_foreign(url, path, flag)
        parent = os.path.dirname(path)
        try:
            if parent:
                os.makedirs(parent, exist_ok=True)
            if url.is_journal:
                from optuna.storages.journal import JournalFileBackend

                return optuna.storages.JournalStorage(JournalFileBackend(path))
            return _sqlite_storage(url, path)
        except (OSError, sqlite3.Error) as exc:
            raise UserError(f"{flag} {url}: cannot open {path}: {exc}") from None
    if url.is_proxy:  # creates nothing: the proxy made the tables; a study is made by create_study
        return open_proxy(url, flag, stale_trial_callback=stale_trial_callback())
    scheme = url.split(":", 1)[0]
    if not scheme.startswith(("postgresql", "mysql")):
        raise UserError(f"{flag} {url}: unknown kind; use sqlite:///FILE.db, {JOURNAL_PREFIX}FILE.log, "
                        f"postgresql+psycopg://user:pw@host:5432/db or {GRPC_PREFIX}HOST:PORT (a `tuner proxy`)")
    # Heartbeats always on for database servers: a dead worker's trial is failed after the grace
    # period and retried once (TUNER_HEARTBEAT_INTERVAL/TUNER_GRACE_PERIOD).
    kwargs = heartbeat_options()
    try:
        if not create and not _server_has_optuna_schema(url):
            raise UserError(f"{flag}: the database at {_server_hint(url)} has no Optuna tables (not an Optuna study "
                            "database); nothing was changed")
        return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True}, skip_table_creation=not create,
                                          **kwargs)
    except UserError:
        raise
    except ImportError as exc:  # SQLAlchemy's dialect import; Optuna wraps it in an ImportError of its own
        missing = getattr(exc.__cause__, "name", None) or exc.name or str(exc)
        extra = "pip install pymysql" if scheme.startswith("mysql") else 'pip install "engine-tuner[postgres]"'
        raise UserError(f"{flag} {scheme}: the database driver is not installed ({missing}); {extra}") from None
    except Exception as exc:  # SQLAlchemy's OperationalError and friends: say where and what to check
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{flag}: cannot reach the database at {_server_hint(url)} ({first}); "
                        "check that the server runs, the host and port, the user, password and database name") from None


def _check_study_file(url: StorageURL, path: str, flag: str) -> None:
    """A file to read studies from exists and (SQLite) holds Optuna's tables; else one line, nothing made."""
    if not os.path.isfile(path):
        raise UserError(f"{flag} {url}: no such file {path}; `tuner studies` lists the studies")
    if not url.is_journal and not _has_optuna_schema(path):
        raise UserError(f"{flag} {url}: {path} is not an Optuna study database; nothing was changed")


def _server_has_optuna_schema(url: str) -> bool:
    import sqlalchemy

    engine = sqlalchemy.create_engine(url)
    try:
        return {"studies", "trials", "version_info"} <= set(sqlalchemy.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def open_for_reading(url: str, flag: str = "--storage") -> optuna.storages.BaseStorage:
    """Open without ever waiting on a process that is tuning: a SQLite file is read with SQLite's plain
    deferred transactions (in WAL mode readers see the last commit and neither wait for nor block a
    writer; the tuner's own connections take the write lock up front). No table is created; a file whose
    schema is being made is opened once its maker is done (RDBStorage stamps its revision even here)."""
    url = StorageURL(url)
    path = url.path
    if path is None or url.is_journal:
        return open_storage(url, create=False, flag=flag)
    _check_study_file(url, path, flag)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        return _one_at_a_time_until_made(path, lambda: optuna.storages.RDBStorage(
            url, engine_kwargs={"connect_args": {"timeout": 60}}, skip_table_creation=True))
    except Exception as exc:  # a schema Optuna cannot read
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{flag} {url}: cannot read {path} as an Optuna study database ({first})") from None


def load_study(name: str, url: str, reading: bool = False) -> optuna.Study:
    """An existing study; a missing one is a one-line error and creates nothing."""
    check_study_name(name)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    path = StorageURL(url).path
    if path is not None and not os.path.isfile(path):
        raise UserError(f"no study {name!r}: no such file {path}; `tuner studies` lists the studies")
    storage = open_for_reading(url) if reading else open_storage(url, create=False)
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        raise UserError(f"no study {name!r} in {url}; `tuner studies` lists the studies") from None


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

    storage = _one_at_a_time_until_made(path, lambda: _open_sqlite(url, path))
    engine = storage.engine

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_con, _record):
        dbapi_con.execute("PRAGMA synchronous=NORMAL")

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # connections opened before the listeners existed
    return storage


def _one_at_a_time_until_made(path: str, open_it):
    """open_it() under the folder's lock until the file's schema is made to the end: RDBStorage's table
    creation and its revision stamp are check-then-create (even a reader's, which skips the tables, stamps),
    so two processes opening one new file (two `tuner tune`, or a reader polling it) fail with "table
    already exists" or a duplicate alembic revision."""
    if _optuna_schema_done(path):
        return open_it()
    with directory_lock(os.path.dirname(os.path.abspath(path))):
        return open_it()


def _open_sqlite(url: str, path: str) -> optuna.storages.RDBStorage:
    with sqlite3.connect(path, timeout=60) as con:
        con.execute("PRAGMA journal_mode=WAL")
    return optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 60, "isolation_level": None}})


def local_storage_urls() -> list[str]:
    """The default storages of this directory: one SQLite file per study under studies/, and the demo's."""
    return [f"sqlite:///{p}" for d in (STUDIES_DIR, DEMO_DIR) for p in sorted(glob.glob(os.path.join(d, "*.db")))]


def migrate(src: str, dst: str, study: str | None = None) -> list[tuple[str, int]]:
    """Copy one study (or every study) from src to dst with trials, attrs and constraints."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    src_storage = open_storage(src, create=False, flag="--from")
    names = [s.study_name for s in optuna.get_all_study_summaries(src_storage, include_best_trial=False)]
    if study is not None:
        if study not in names:
            raise UserError(f"no study {study!r} in {src}" + (f" (it has: {', '.join(names)})" if names else ""))
        names = [study]
    if not names:
        raise UserError(f"no studies in {src}")
    dst_storage = open_storage(dst, flag="--to")  # only once there is something to copy: a refusal makes no file
    existing = {s.study_name for s in optuna.get_all_study_summaries(dst_storage, include_best_trial=False)}
    clash = [n for n in names if n in existing]
    if clash:
        raise UserError(f"study {clash[0]!r} already exists in {dst}; nothing copied (delete it there or migrate another)")
    out = []
    for n in names:
        optuna.copy_study(from_study_name=n, from_storage=src_storage, to_storage=dst_storage, to_study_name=n)
        out.append((n, len(optuna.load_study(study_name=n, storage=dst_storage).trials)))
    return out
