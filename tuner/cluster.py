"""Many workers, possibly on many machines, on one study in one database (PostgreSQL for hosts).

- `tuner worker --study NAME --storage URL` joins an existing study with its stored settings
  (model, space, data, requirement, sampler, timing protocol); files are found by their stored
  paths or by --model/--data/--space where they live elsewhere, and must hash like the study's.
- A study-wide budget (`tuner tune ... --max-trials N`, stored in the study) is exact across all
  workers: every trial is claimed under a database lock (PostgreSQL advisory lock, MySQL GET_LOCK,
  a lock file next to a SQLite/journal file) held from "count the trials finished or running"
  through Optuna's own `ask` inside `study.optimize` (the objective releases it at its first line).
- Dead workers: database storages run with heartbeats; a worker killed with -9 leaves its trial
  RUNNING until the grace period ends, then the next claim fails it (Optuna's fail_stale_trials,
  under the same lock) and RetryHeartbeatStaleTrialCallback queues it once more. A failed-and-retried
  trial does not count against the budget; its retry does.
- Timings from another machine are not comparable: a worker whose fingerprint differs from the
  study's refuses to join unless --allow-other-machine; then its trials carry its fingerprint and
  a baseline is queued for its machine, which that worker runs itself.
- Static-quantization calibration ranges are shared through the study (one user attr per cache key).
- `tuner migrate` copies studies between storages (optuna.copy_study).
"""
from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import json
import os
import socket
import time
import warnings
from dataclasses import asdict

import optuna
from optuna.trial import TrialState

from . import evaluate
from .errors import UserError
from .machine import fingerprint, same_machine
from .measure.latency import LatencyProtocol
from .model import model_hash
from .storage import local_path, open_storage

MAX_TRIALS_ATTR = "max_trials"
PROTOCOL_ATTR = "protocol"
CALIB_PREFIX = "calib/"
HEARTBEAT_ENV = "TUNER_HEARTBEAT_INTERVAL"
GRACE_ENV = "TUNER_GRACE_PERIOD"
POLL_S = 1.0


# ---------------------------------------------------------------- heartbeats


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
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # heartbeats are "experimental"
    return {"heartbeat_interval": interval, "grace_period": grace,
            "heartbeat_stale_trial_callback": optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1)}


# ---------------------------------------------------------------- machines and workers


def machine_id(fp: dict) -> str:
    """A short id of what decides timings (the fields same_machine compares)."""
    keys = ("cpu", "cores", "memory_gib", "system", "versions")
    fields = {k: fp.get(k) for k in keys} | ({"tag": fp["tag"]} if fp.get("tag") else {})
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:8]


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# ---------------------------------------------------------------- the claim lock


class ClaimLock:
    """A lock over one study, held across "count + create the trial"; released by the server (or
    the kernel, for a lock file) when its holder dies."""

    def __init__(self, url: str, study_name: str):
        self.url, self.study_name = url, study_name
        self._key = int.from_bytes(hashlib.sha256(f"engine-tuner/{study_name}".encode()).digest()[:8], "big",
                                   signed=True)
        self._engine = None
        self._conn = None
        self._file = None
        self.held = False
        path = local_path(url)
        self.kind = "file" if path is not None else ("mysql" if url.startswith("mysql") else "postgresql")
        self._path = f"{path}.{study_name}.claim.lock" if path is not None else None

    def acquire(self) -> None:
        if self.held:
            return
        if self.kind == "file":
            self._file = open(self._path, "a+")
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX)
        else:
            # A connection per claim: the lock dies with it. On PostgreSQL 14+, idle_session_timeout
            # also frees it when the holder's host vanishes without closing its socket (power loss).
            conn = self._connection()
            if self.kind == "postgresql":
                with contextlib.suppress(Exception):
                    conn.exec_driver_sql("SET idle_session_timeout = '60s'")
                    conn.commit()
                conn.rollback()
            sql = "SELECT pg_advisory_lock(:k)" if self.kind == "postgresql" else "SELECT GET_LOCK(:k, -1)"
            conn.execute(_text(sql), {"k": self._key if self.kind == "postgresql" else f"tuner-{self._key}"})
            conn.commit()  # the session-level lock stays; no transaction is left open
        self.held = True

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        if self.kind == "file":
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None
        else:
            sql = "SELECT pg_advisory_unlock(:k)" if self.kind == "postgresql" else "SELECT RELEASE_LOCK(:k)"
            try:
                self._conn.execute(_text(sql), {"k": self._key if self.kind == "postgresql" else f"tuner-{self._key}"})
                self._conn.commit()
            finally:
                self._conn.close()  # closing would free the lock anyway
                self._conn = None

    def _connection(self):
        if self._conn is None:
            if self._engine is None:
                from sqlalchemy import create_engine
                from sqlalchemy.pool import NullPool

                self._engine = create_engine(self.url, poolclass=NullPool)
            self._conn = self._engine.connect()
        return self._conn

    def close(self) -> None:
        self.release()
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _text(sql: str):
    from sqlalchemy import text

    return text(sql)


# ---------------------------------------------------------------- counting against the budget


def retried_numbers(trials) -> set[int]:
    """Trials failed because their worker died and queued again (heartbeat retry or local recovery)."""
    out: set[int] = set()
    for t in trials:
        out.update(t.system_attrs.get("retry_history", []))
        if "retry_of" in t.user_attrs:
            out.add(t.user_attrs["retry_of"])
    return out


def budget_counts(trials) -> tuple[int, int]:
    """(finished, running) as the study-wide budget counts them: complete, pruned and failed trials,
    except failed ones that were retried (their retry counts instead)."""
    retried = retried_numbers(trials)
    finished = sum(1 for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
                   or (t.state == TrialState.FAIL and t.number not in retried))
    running = sum(1 for t in trials if t.state == TrialState.RUNNING)
    return finished, running


class TrialClaims:
    """Claims each trial of a trial loop: the study-wide budget, this machine's baseline, the shared
    calibration ranges. Use acquire() before study.optimize(claims.wrap(objective), n_trials=1)."""

    def __init__(self, ctx, budget=None, other_machine: bool = False):
        self.ctx = ctx
        self.budget = budget
        self.other_machine = other_machine
        self.lock = ClaimLock(ctx.url, ctx.study.study_name)
        self.mid = machine_id(ctx.settings["machine"])

    def _stopped(self) -> bool:
        b = self.budget
        if b is None:
            return False
        deadline = getattr(b, "_deadline", None)
        return b._stop.is_set() or (deadline is not None and time.time() >= deadline)

    def acquire(self) -> bool:
        """Take the lock for one trial; False (lock released) once the study-wide budget is spent.
        While the budget is taken by running trials, wait: one of them may die and need its retry."""
        study = self.ctx.study
        while True:
            self.lock.acquire()
            try:
                optuna.storages.fail_stale_trials(study)
                limit = study.user_attrs.get(MAX_TRIALS_ATTR)
                if limit is None and not self.other_machine:
                    return True  # no study-wide budget: nothing to count
                trials = study.get_trials(deepcopy=False)
                finished, running = budget_counts(trials)
                if limit is None or finished + running < limit:
                    if self.other_machine:
                        self._queue_machine_baseline(trials)
                    return True
            except BaseException:
                self.lock.release()
                raise
            self.lock.release()
            if finished >= limit or self._stopped():
                return False
            time.sleep(POLL_S)

    def release(self) -> None:
        self.lock.release()

    def close(self) -> None:
        self.lock.close()

    def _queue_machine_baseline(self, trials) -> None:
        """Queue this machine's baseline when the queue is empty: the claim lock is held through the
        next ask, which pops the oldest waiting trial, so this worker runs it."""
        from .study import _params_for

        mine = [t for t in trials if t.user_attrs.get("baseline") and t.state != TrialState.FAIL
                and t.user_attrs.get("baseline_machine", machine_id(t.user_attrs.get("machine") or {})) == self.mid]
        if mine or any(t.state == TrialState.WAITING for t in trials):
            return
        p = self.ctx.problem
        params = _params_for(p, {}, self.ctx.settings["sampler"] == "grid", self.ctx.settings.get("rankings"))
        self.ctx.study.enqueue_trial(params, user_attrs={"baseline": True, "baseline_machine": self.mid})

    def wrap(self, objective):
        def run(trial: optuna.Trial):
            trial.set_user_attr("worker", worker_name())
            self.lock.release()  # the trial exists and is RUNNING: the next claim counts it
            download_calibration(self.ctx.study)
            try:
                return objective(trial)
            finally:
                upload_calibration(self.ctx.study, self.ctx.problem.calib_key)
        return run


# ---------------------------------------------------------------- shared calibration ranges


def download_calibration(study: optuna.Study) -> None:
    """Write the study's stored calibration ranges into the local cache (int8-static reads them)."""
    attrs = study.user_attrs
    for key, text in attrs.items():
        if not key.startswith(CALIB_PREFIX):
            continue
        path = os.path.join(evaluate.CACHE_DIR, key[len(CALIB_PREFIX):])
        if not os.path.isfile(path):
            os.makedirs(evaluate.CACHE_DIR, exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, path)


def upload_calibration(study: optuna.Study, calib_key: str) -> None:
    """Store calibration ranges computed here once per cache key, for every other worker."""
    stored = study.user_attrs
    for path in glob.glob(os.path.join(evaluate.CACHE_DIR, f"calib-{calib_key}-*.json")):
        key = CALIB_PREFIX + os.path.basename(path)
        if key not in stored:
            with open(path) as f:
                study.set_user_attr(key, f.read())


# ---------------------------------------------------------------- settings a worker can run with


def store_run_settings(study: optuna.Study, max_trials: int | None, protocol: LatencyProtocol | None) -> None:
    """What `tune` stores for workers: the study-wide budget and the timing protocol."""
    if max_trials is not None:
        if max_trials < 1:
            raise UserError(f"--max-trials {max_trials}: needs at least 1")
        study.set_user_attr(MAX_TRIALS_ATTR, max_trials)
    if protocol is not None or PROTOCOL_ATTR not in study.user_attrs:
        study.set_user_attr(PROTOCOL_ATTR, asdict(protocol) if protocol else None)


def _localize(name: str, settings: dict, key: str, given: str | None, what: str, flag: str, hash_key: str | None,
              hash_fn) -> None:
    """Point settings[key] at the local file: the given one, else the stored path; hashes must match."""
    if given is None:
        path = settings.get(key)
        if path is None:
            return
        if not os.path.isfile(path):
            alt = _packaged_space(settings, path) if key == "space_path" else None
            if alt is None:
                raise UserError(f"study {name!r}: its {what} {path} is not on this host; pass it with {flag} PATH")
            path = alt
    else:
        if not os.path.isfile(given):
            raise UserError(f"{flag} {given}: no such file")
        path = os.path.abspath(given)
    if hash_key and settings.get(hash_key) and hash_fn(path) != settings[hash_key]:
        raise UserError(f"study {name!r}: {path} is not the study's {what} ({hash_key} {hash_fn(path)}, the study has "
                        f"{settings[hash_key]}); refusing to join: give the same file with {flag}")
    settings[key] = path


def _packaged_space(settings: dict, stored: str) -> str | None:
    from .space import SPACES_DIR
    from .study import _file_hash

    alt = os.path.join(SPACES_DIR, os.path.basename(stored))
    return alt if os.path.isfile(alt) and _file_hash(alt) == settings.get("space_hash") else None


def join_study(url: str, name: str, model: str | None = None, data: str | None = None, space: str | None = None,
               calib_data: str | None = None, allow_other_machine: bool = False):
    """Open an existing study as a worker: (StudyContext with local paths and this machine, other_machine)."""
    from .study import SETTINGS_ATTR, StudyContext, _file_hash, make_sampler, problem_spec

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    storage = open_storage(url)
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        raise UserError(f"no study {name!r} in {url}; create it first: tuner tune MODEL.onnx --study {name} --storage URL") from None
    settings = dict(study.user_attrs.get(SETTINGS_ATTR) or {})
    if not settings:
        raise UserError(f"study {name!r} was not made by engine-tuner (no {SETTINGS_ATTR}); create it with tuner tune")
    _localize(name, settings, "model_path", model, "model", "--model", "model_hash", model_hash)
    _localize(name, settings, "space_path", space, "space file", "--space", "space_hash", _file_hash)
    _localize(name, settings, "data", data, "validation data", "--data", None, None)
    _localize(name, settings, "calib_data", calib_data, "calibration data", "--calib-data", None, None)
    problem = problem_spec(settings).load()
    if settings.get("data_hash") not in (None, problem.data_hash):
        raise UserError(f"study {name!r}: the validation data here differ from the study's (data hash "
                        f"{problem.data_hash}, the study has {settings['data_hash']}); refusing to join")
    here = fingerprint()
    other = not same_machine(settings["machine"], here)
    if other and not allow_other_machine:
        theirs = settings["machine"]
        raise UserError(f"study {name!r} was timed on another machine ({theirs.get('cpu')}, {theirs.get('cores')} cores, "
                        f"machine {machine_id(theirs)}; this is {here.get('cpu')}, {here.get('cores')} cores, machine "
                        f"{machine_id(here)}): latencies would not compare; add --allow-other-machine to join anyway "
                        "(this machine then gets its own baseline)")
    settings["study_machine"] = settings["machine"]
    settings["machine"] = here  # trials run here carry this machine's fingerprint (nothing is written back)
    settings["spec"] = asdict(problem_spec(settings))
    study.sampler = make_sampler(settings, problem, worker=os.getpid())
    return StudyContext(study, settings, problem, url), other


def run_worker(url: str, name: str, n_trials: int | None = None, timeout: float | None = None,
               model: str | None = None, data: str | None = None, space: str | None = None,
               calib_data: str | None = None, allow_other_machine: bool = False, trial_timeout: float = 600.0,
               protocol: LatencyProtocol | None = None, quiet: bool = True, keep_engines: bool = False,
               engines_dir: str | None = None) -> dict:
    """`tuner worker`: run trials of an existing study until its budget (or this worker's) is spent."""
    from .progress import TrialProgress
    from .study import TuneOptions
    from .workers import Budget, trial_loop

    if n_trials is not None and n_trials < 1:
        raise UserError(f"--n-trials {n_trials}: needs at least 1")
    ctx, other = join_study(url, name, model, data, space, calib_data, allow_other_machine)
    if n_trials is None and timeout is None and MAX_TRIALS_ATTR not in ctx.study.user_attrs:
        raise UserError(f"study {name!r} has no study-wide budget (tuner tune ... --max-trials N); "
                        "give this worker --n-trials N and/or --timeout T")
    if protocol is None and ctx.study.user_attrs.get(PROTOCOL_ATTR):
        protocol = LatencyProtocol(**ctx.study.user_attrs[PROTOCOL_ATTR])
    opts = TuneOptions(study=name, storage=url, n_trials=n_trials, timeout=timeout, trial_timeout=trial_timeout,
                       protocol=protocol, quiet=quiet, progress=not quiet, keep_engines=keep_engines,
                       engines_dir=engines_dir or os.path.join("tuner-engines", f"{name}-{worker_name().replace(':', '-')}"))
    budget = Budget(n_trials, timeout)
    with TrialProgress(n_trials, timeout, live=not quiet, quiet=quiet) as progress:
        trial_loop(ctx, opts, budget, [progress], claims=TrialClaims(ctx, budget, other_machine=other))
    trials = ctx.study.get_trials(deepcopy=False)
    finished, running = budget_counts(trials)
    return {"ran": progress.done, "finished": finished, "running": running,
            "max_trials": ctx.study.user_attrs.get(MAX_TRIALS_ATTR), "other_machine": other,
            "machine": machine_id(ctx.settings["machine"])}


# ---------------------------------------------------------------- migrate


def migrate(src: str, dst: str, study: str | None = None) -> list[tuple[str, int]]:
    """Copy one study (or every study) from src to dst with trials, attrs and constraints."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    src_storage, dst_storage = open_storage(src), open_storage(dst)
    names = [s.study_name for s in optuna.get_all_study_summaries(src_storage, include_best_trial=False)]
    if study is not None:
        if study not in names:
            raise UserError(f"no study {study!r} in {src}" + (f" (it has: {', '.join(names)})" if names else ""))
        names = [study]
    if not names:
        raise UserError(f"no studies in {src}")
    existing = {s.study_name for s in optuna.get_all_study_summaries(dst_storage, include_best_trial=False)}
    clash = [n for n in names if n in existing]
    if clash:
        raise UserError(f"study {clash[0]!r} already exists in {dst}; nothing copied (delete it there or migrate another)")
    out = []
    for n in names:
        optuna.copy_study(from_study_name=n, from_storage=src_storage, to_storage=dst_storage, to_study_name=n)
        out.append((n, len(optuna.load_study(study_name=n, storage=dst_storage).trials)))
    return out


# ---------------------------------------------------------------- command line


def _parse_duration(text):
    from .cli import parse_duration

    return parse_duration(text)


def cmd_worker(args) -> int:
    rep = run_worker(args.storage, args.study, args.n_trials, args.timeout, args.model, args.data, args.space,
                     args.calib_data, args.allow_other_machine, args.trial_timeout,
                     LatencyProtocol(max_seconds=args.max_timing_s) if args.max_timing_s else None, args.quiet)
    budget = f" of the study's budget {rep['max_trials']}" if rep["max_trials"] else ""
    print(f"worker {worker_name()} (machine {rep['machine']}{', not the study machine' if rep['other_machine'] else ''}): "
          f"{rep['ran']} trials run; study: {rep['finished']} finished{budget}, {rep['running']} running")
    return 0


def cmd_migrate(args) -> int:
    for name, n in migrate(args.from_url, args.to_url, args.study):
        print(f"copied study {name}: {n} trials, with their attrs and constraints, to {args.to_url}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("worker", help="join an existing study (any host, one database) and run its trials")
    p.add_argument("--study", required=True, help="study name")
    p.add_argument("--storage", required=True, help="storage URL, e.g. postgresql+psycopg://user:pw@host:5432/db")
    p.add_argument("--n-trials", type=int, help="at most this many trials from this worker")
    p.add_argument("--timeout", type=_parse_duration, help="stop starting trials after this long, e.g. 2h")
    p.add_argument("--model", help="the study's model file here, where its stored path differs (same content)")
    p.add_argument("--data", help="the study's validation .npz here, where its stored path differs")
    p.add_argument("--calib-data", help="the study's calibration .npz here, where its stored path differs")
    p.add_argument("--space", help="the study's space file here, where its stored path differs")
    p.add_argument("--allow-other-machine", action="store_true",
                   help="join although this machine differs from the study's (it gets its own baseline)")
    p.add_argument("--trial-timeout", type=_parse_duration, default=600.0, help="time limit of one trial (default 600 s)")
    p.add_argument("--max-timing-s", type=float, help="cap on one candidate's timing (default: the study's)")
    p.add_argument("--quiet", action="store_true", help="no live display: one log line per trial")
    p.set_defaults(func=cmd_worker)
    p = sub.add_parser("migrate", help="copy studies between storages, e.g. a SQLite file to PostgreSQL")
    p.add_argument("--from", dest="from_url", required=True, help="source storage URL")
    p.add_argument("--to", dest="to_url", required=True, help="target storage URL")
    p.add_argument("--study", help="only this study (default: all)")
    p.set_defaults(func=cmd_migrate)
