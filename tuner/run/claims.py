"""Claims on a shared study: the study-wide trial budget, exact across every worker and host.

Every trial is claimed under a database lock (PostgreSQL advisory lock, MySQL GET_LOCK, a lock file
next to a SQLite/journal file) held from "count the trials finished or running" through Optuna's own
`ask` inside `study.optimize` (the objective releases it at its first line). Dead workers: their
trials go stale under heartbeats and are failed under the same lock, then retried once; a failed and
retried trial does not count against the budget, its retry does. Calibration ranges of int8-static
are shared through the study (one user attr per cache key), so hosts do not recalibrate.
"""
from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import os
import socket
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime

import optuna
from optuna.trial import TrialState

from ..errors import UserError
from ..measure.latency import LatencyProtocol
from ..measure.machine import machine_id
from ..search.enqueue import baseline_params
from ..search.record import BASELINE, BASELINE_MACHINE, FAIL_REASON, MAX_TRIALS_ATTR, PROTOCOL_ATTR, StoredStudy, StoredTrial
from ..store import cache
from ..store.optuna_private import BaseHeartbeat, is_heartbeat_enabled, storage_of, trial_id
from ..store.proxy_client import ProxyClaimLock
from ..store.storage import StorageURL, heartbeat_options

CALIB_PREFIX = "calib/"
POLL_S = 1.0


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
        self._path = StorageURL(url).claim_lock(study_name)
        self.kind = "file" if self._path is not None else ("mysql" if url.startswith("mysql") else "postgresql")

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
        retried = StoredTrial.of(t).retry_of
        if retried is not None:
            out.add(retried)
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
        # behind a `tuner proxy` (grpc://): the proxy holds the same database lock for this worker
        self.lock = (ProxyClaimLock if StorageURL(ctx.url).is_proxy else ClaimLock)(ctx.url, ctx.study.study_name)
        self.mid = machine_id(ctx.settings.machine)
        self.study_attrs: dict = {}
        self.uploaded: set[str] = set()  # calibration keys this worker knows the study holds

    def _stopped(self) -> bool:
        return self.budget is not None and self.budget.stopped()

    def acquire(self) -> bool:
        """Take the lock for one trial; False (lock released) once the study-wide budget is spent.
        While the budget is taken by running trials, wait: one of them may die and need its retry."""
        study = self.ctx.study
        while True:
            self.lock.acquire()
            try:
                optuna.storages.fail_stale_trials(study)
                fail_unclaimed(study, heartbeat_options()["grace_period"])
                self.study_attrs = study.user_attrs  # the trial's one read of them (wrap: the calibration ranges)
                limit = StoredStudy.of(self.study_attrs).max_trials
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
        recs = [(t, StoredTrial.of(t)) for t in trials]
        mine = [t for t, r in recs if r.baseline and t.state != TrialState.FAIL
                and (r.baseline_machine if r.baseline_machine is not None else machine_id(r.machine)) == self.mid]
        if mine or any(t.state == TrialState.WAITING for t in trials):
            return
        self.ctx.study.enqueue_trial(baseline_params(self.ctx), user_attrs={BASELINE: True, BASELINE_MACHINE: self.mid})

    def wrap(self, objective):
        def run(trial: optuna.Trial):
            self.lock.release()  # the trial exists and is RUNNING: the next claim counts it
            self.uploaded |= download_calibration(self.study_attrs)
            try:
                return objective(trial)
            finally:
                self.uploaded |= upload_calibration(self.ctx.study, self.ctx.problem.calib_key, self.uploaded)
        return run


def fail_unclaimed(study: optuna.Study, grace_s: float, now: Callable[[], datetime] = datetime.now) -> list[int]:
    """Fail, and queue once more, the RUNNING trials of workers killed inside Optuna's ask: the trial exists but
    no worker recorded it (WORKER, the objective's first write) and it has no heartbeat (Optuna starts those
    after ask), so fail_stale_trials never sees it and the study-wide budget waits on it forever (found by
    bench/kill_loop_bench.py). Called under the claim lock, which every worker holds through its ask: no
    trial without WORKER older than the grace period belongs to a live worker. Returns their numbers."""
    storage, failed = storage_of(study), []
    if not isinstance(storage, BaseHeartbeat) or not is_heartbeat_enabled(storage):
        return []  # a local file: tune's run lock finds a dead run instead (run.tune.recover_stale_trials)
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        claimed = StoredTrial.of(t).worker is not None  # a worker writes it with the config, before building
        if claimed or t.datetime_start is None or (now() - t.datetime_start).total_seconds() <= grace_s:
            continue
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            storage.set_trial_user_attr(trial_id(t), FAIL_REASON, "its worker died as Optuna created it, before "
                                                                   "its first heartbeat")
            if storage.set_trial_state_values(trial_id(t), TrialState.FAIL):
                failed.append(trial_id(t))
    callback = storage.get_heartbeat_stale_trial_callback()
    for tid in failed if callback is not None else []:  # as fail_stale_trials does: the retry
        callback(study, storage.get_trial(tid))
    return [storage.get_trial(i).number for i in failed]


# ---------------------------------------------------------------- shared calibration ranges


def download_calibration(study_attrs: dict) -> set[str]:
    """Write the calibration ranges among the study's user attributes into the local cache (int8-static reads
    them). Returns their keys."""
    keys = {key for key in study_attrs if key.startswith(CALIB_PREFIX)}
    for key in keys:
        name = key[len(CALIB_PREFIX):]
        if not os.path.isfile(cache.cache_path(name)):
            cache.write_text(name, study_attrs[key])
    return keys


def upload_calibration(study: optuna.Study, calib_key: str, known: set[str] = frozenset()) -> set[str]:
    """Store calibration ranges computed here once per cache key, for every other worker. `known`: keys the
    study is known to hold (the study is read only when a local range is not among them). Returns the keys
    the study holds of this worker's ranges."""
    keys = {CALIB_PREFIX + os.path.basename(p) for p in glob.glob(cache.cache_path(f"calib-{calib_key}-*.json"))}
    if keys <= known:
        return keys
    stored = study.user_attrs
    for key in keys - stored.keys():
        with open(cache.cache_path(key[len(CALIB_PREFIX):])) as f:
            study.set_user_attr(key, f.read())
    return keys


def store_run_settings(study: optuna.Study, max_trials: int | None, protocol: LatencyProtocol | None) -> None:
    """What `tune` stores for workers: the study-wide budget and the timing protocol."""
    if max_trials is not None:
        if max_trials < 1:
            raise UserError(f"--max-trials {max_trials}: needs at least 1")
        study.set_user_attr(MAX_TRIALS_ATTR, max_trials)
    if protocol is not None or not StoredStudy.of(study).has_protocol:
        study.set_user_attr(PROTOCOL_ATTR, asdict(protocol) if protocol else None)


