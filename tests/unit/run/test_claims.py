"""Claims on a shared study (tuner.run.claims) against real SQLite Optuna storages in tmp_path: what the
study-wide budget counts, the claim lock held from the count to the trial's first line, several study
handles (as several workers) sharing one budget exactly, a dead worker's stale trial failed and retried
under the lock, another machine's baseline, and the calibration ranges shared through the study."""
import fcntl
import json
import os
import shutil
import sqlite3
import threading
import time
from dataclasses import asdict
from types import SimpleNamespace

import optuna
import pytest
from optuna.trial import TrialState

from tuner.errors import UserError
from tuner.inputs.space import SPACES_DIR, load_space
from tuner.measure.latency import LatencyProtocol
from tuner.measure.machine import machine_id
from tuner.run import claims as claims_mod
from tuner.run.claims import (
    CALIB_PREFIX,
    ClaimLock,
    TrialClaims,
    budget_counts,
    download_calibration,
    retried_numbers,
    store_run_settings,
    upload_calibration,
    worker_name,
)
from tuner.run.local_workers import Budget
from tuner.search.record import BASELINE, BASELINE_MACHINE, MACHINE, MAX_TRIALS_ATTR, PROTOCOL_ATTR, RETRY_OF
from tuner.search.settings import StudySettings
from tuner.store.storage import open_storage

optuna.logging.set_verbosity(optuna.logging.ERROR)
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # heartbeats
HERE = {"cpu": "this-cpu"}  # the machine fingerprint of the workers in these tests
SMALL = load_space(os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml"))


@pytest.fixture(scope="module")
def empty_db(tmp_path_factory):
    """A SQLite file with Optuna's tables and no study: copied per test (creating the tables takes 0.3 s)."""
    path = tmp_path_factory.mktemp("claims") / "empty.db"
    open_storage(f"sqlite:///{path}").engine.dispose()
    assert sorted(os.listdir(path.parent)) == ["empty.db"]  # no WAL left beside it: the copy is whole
    return path


@pytest.fixture
def url(tmp_path, monkeypatch, empty_db):
    monkeypatch.setenv("TUNER_CACHE", str(tmp_path / "cache"))  # this test's own cache (calibration files)
    monkeypatch.setattr(claims_mod, "POLL_S", 0.02)
    shutil.copy(empty_db, tmp_path / "s.db")
    url = f"sqlite:///{tmp_path}/s.db"
    optuna.create_study(study_name="s", storage=open_storage(url), sampler=optuna.samplers.RandomSampler(seed=0))
    return url


def handle(url, storage=None) -> optuna.Study:
    """One worker's own study object on the shared file."""
    return optuna.load_study(study_name="s", storage=storage or open_storage(url),
                             sampler=optuna.samplers.RandomSampler(seed=0))


_READERS: dict[str, optuna.storages.BaseStorage] = {}


def stored(url) -> optuna.Study:
    """The study as the file holds it now, read through one reader per file (opening a storage takes 0.1 s)."""
    if url not in _READERS:
        _READERS[url] = open_storage(url)
    return optuna.load_study(study_name="s", storage=_READERS[url])


def context(url, study=None, calib_key="k"):
    """What TrialClaims reads of a StudyContext: the storage URL, the study, this machine, the problem."""
    return SimpleNamespace(url=url, study=study or handle(url), settings=StudySettings.from_attrs({"machine": HERE}),
                           problem=SimpleNamespace(space=SMALL, graph_nodes=[], calib_key=calib_key))


def lock_is_free(path) -> bool:
    with open(path, "a+") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        return True


def objective(trial):
    return trial.suggest_float("x", 0.0, 1.0)


def claim(claims, within: float = 20.0) -> bool:
    """claims.acquire(), failed (not hung) when it does not return: a claim that waits for ever stalls
    every worker of the study."""
    result = []
    thread = threading.Thread(target=lambda: result.append(claims.acquire()), daemon=True)
    thread.start()
    thread.join(within)
    if thread.is_alive():
        claims.budget.stop()  # lets a claim that still checks its run's budget return
        pytest.fail(f"the claim did not return within {within} s")
    assert result, "the claim raised (see the thread's traceback above)"
    return result[0]


def run_one(claims) -> bool:
    """One claimed trial, as trial_loop runs it; False when the claim is refused."""
    if not claim(claims):
        return False
    try:
        claims.ctx.study.optimize(claims.wrap(objective), n_trials=1)
    finally:
        claims.release()
    return True


def test_budget_counts_finished_and_running_with_retried_failures_left_out(url):
    study = handle(url)
    for state in (TrialState.COMPLETE, TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL):
        t = study.ask()
        study.tell(t, 1.0 if state == TrialState.COMPLETE else None, state=state)
    locally_retried = study.tell(study.ask(), state=TrialState.FAIL)  # trial 4: `tune` recovers it on resume
    study.enqueue_trial({}, user_attrs={RETRY_OF: locally_retried.number})
    study.tell(study.ask(), 1.0)  # trial 5: that retry, complete
    stale = study.tell(study.ask(), state=TrialState.FAIL)  # trial 6: failed by heartbeat, queued again
    optuna.storages.RetryHeartbeatStaleTrialCallback()(study, study._storage.get_trial(stale._trial_id))
    study.ask()  # trial 7: the heartbeat retry, RUNNING
    study.ask()  # trial 8: RUNNING
    study.enqueue_trial({})  # trial 9: WAITING, not counted
    trials = study.get_trials(deepcopy=False)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2 + [TrialState.PRUNED, TrialState.FAIL, TrialState.FAIL,
                                         TrialState.COMPLETE, TrialState.FAIL] + [TrialState.RUNNING] * 2 + [TrialState.WAITING]
    assert retried_numbers(trials) == {4, 6}
    assert budget_counts(trials) == (5, 2)  # 0, 1, 2, 3 (a failure never retried), 5; 7 and 8 running
    assert budget_counts([]) == (0, 0)


def test_the_claim_lock_is_a_file_beside_the_database_held_until_release(url, tmp_path):
    lock = ClaimLock(url, "s")
    path = tmp_path / "s.db.s.claim.lock"
    assert lock.kind == "file" and lock._path == str(path)
    lock.acquire()
    lock.acquire()  # held already: nothing more to take
    assert lock.held and not lock_is_free(path)
    lock.release()
    assert not lock.held and lock_is_free(path)
    lock.release()  # released twice: nothing happens
    other = ClaimLock(url, "t")  # another study on the same file: its own lock
    assert other._path == str(tmp_path / "s.db.t.claim.lock")


def test_a_second_claimer_waits_for_the_first_to_release(url, tmp_path):
    first, second = ClaimLock(url, "s"), ClaimLock(url, "s")
    first.acquire()
    got = threading.Event()

    def take():
        second.acquire()
        got.set()

    thread = threading.Thread(target=take)
    thread.start()
    assert not got.wait(0.3)  # blocked while the first holds it
    first.release()
    assert got.wait(10)
    thread.join()
    assert second.held and not lock_is_free(tmp_path / "s.db.s.claim.lock")
    second.close()
    assert lock_is_free(tmp_path / "s.db.s.claim.lock")


def test_the_objective_starts_with_the_lock_released(url, tmp_path):
    store_run_settings(handle(url), 5, None)
    claims = TrialClaims(context(url), Budget(None, None))
    seen = []

    def check(trial):
        seen.append(lock_is_free(tmp_path / "s.db.s.claim.lock"))
        return 1.0

    assert claim(claims) and claims.lock.held
    claims.ctx.study.optimize(claims.wrap(check), n_trials=1)
    claims.release()
    assert seen == [True]  # the trial exists (RUNNING), so the next claim counts it: the lock can go
    assert worker_name().endswith(f":{os.getpid()}")  # what the objective records as the trial's worker


def test_several_study_handles_share_the_study_wide_budget_exactly(url):
    store_run_settings(handle(url), 5, None)
    workers = [TrialClaims(context(url), Budget(None, None)) for _ in range(3)]
    ran = [run_one(workers[i % 3]) for i in range(9)]
    assert ran == [True] * 5 + [False] * 4
    trials = stored(url).trials
    assert len(trials) == 5 and all(t.state == TrialState.COMPLETE for t in trials)
    assert budget_counts(trials) == (5, 0)
    assert all(not w.lock.held for w in workers)  # a refused claim releases the lock
    for w in workers:
        w.close()


def test_without_a_study_wide_budget_every_claim_is_granted(url):
    workers = [TrialClaims(context(url), Budget(None, None)) for _ in range(2)]
    assert [run_one(workers[i % 2]) for i in range(7)] == [True] * 7
    assert len(stored(url).trials) == 7


def test_a_budget_taken_by_a_running_trial_waits_then_is_refused_when_this_run_stops(url, tmp_path):
    other = handle(url)
    store_run_settings(other, 2, None)
    other.tell(other.ask(), 1.0)
    other.ask()  # another worker's trial, RUNNING: it may still fail and need its retry
    budget = Budget(None, None)
    claims = TrialClaims(context(url), budget)
    threading.Timer(0.3, budget.stop).start()
    start = time.monotonic()
    assert claim(claims) is False
    assert time.monotonic() - start >= 0.25  # it waited for the running trial until this run was stopped
    assert not claims.lock.held and lock_is_free(tmp_path / "s.db.s.claim.lock")
    assert len(stored(url).trials) == 2


def test_a_running_trial_that_fails_and_is_retried_gives_its_place_to_the_retry(url):
    other = handle(url)
    store_run_settings(other, 2, None)
    other.tell(other.ask(), 1.0)
    running = other.ask()
    claims = TrialClaims(context(url), Budget(None, None))

    def fail_and_retry():  # under the claim lock, as a claim's fail_stale_trials does it: never half done
        time.sleep(0.2)
        lock = ClaimLock(url, "s")
        lock.acquire()
        frozen = other.tell(running, state=TrialState.FAIL)
        optuna.storages.RetryHeartbeatStaleTrialCallback()(other, other._storage.get_trial(frozen._trial_id))
        lock.release()

    thread = threading.Thread(target=fail_and_retry)
    thread.start()
    assert run_one(claims)  # waited, then ran the retry
    thread.join()
    trials = stored(url).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.FAIL, TrialState.COMPLETE]
    assert trials[2].system_attrs["failed_trial"] == 1
    assert budget_counts(trials) == (2, 0)
    assert not run_one(claims)  # the budget is spent: the failure does not count, its retry does


@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used with Study.optimize")
def test_a_dead_workers_stale_trial_is_failed_and_retried_under_the_claim(url, tmp_path):
    heartbeat = optuna.storages.RDBStorage(
        url, heartbeat_interval=1, grace_period=10,
        heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1))
    dead = handle(url, heartbeat)
    store_run_settings(dead, 2, None)
    dead.tell(dead.ask(), 1.0)
    stale = dead.ask()
    heartbeat.record_heartbeat(stale._trial_id)
    budget = Budget(None, None)
    budget.stop()  # a claim that finds the budget taken is refused at once
    claims = TrialClaims(context(url, handle(url, heartbeat)), budget)
    assert claim(claims) is False  # its heartbeat is fresh: the trial still runs and holds the last place
    # Its worker died a minute ago: the last heartbeat, moved back in Optuna's own table (a sleep past the
    # grace period would do the same, slowly).
    with sqlite3.connect(tmp_path / "s.db") as con:
        assert con.execute("UPDATE trial_heartbeats SET heartbeat = datetime('now', '-60 seconds') "
                           "WHERE trial_id = ?", (stale._trial_id,)).rowcount == 1
    assert stored(url).trials[1].state == TrialState.RUNNING
    assert claim(claims) is True  # failed under the claim, its retry queued: one place free
    claims.release()
    trials = stored(url).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.FAIL, TrialState.WAITING]
    assert trials[2].system_attrs["failed_trial"] == 1 and budget_counts(trials) == (1, 0)


def _baseline_from_another_machine(url) -> optuna.Study:
    study = handle(url)
    study.enqueue_trial({}, user_attrs={BASELINE: True, MACHINE: {"cpu": "other-cpu"}})
    study.optimize(objective, n_trials=1)  # trial 0: the baseline timed where the study began
    return study


def _claim_and_release(claims) -> None:
    assert claim(claims)
    claims.release()


def test_another_machine_queues_its_own_baseline_once(url):
    study = _baseline_from_another_machine(url)
    claims = TrialClaims(context(url), Budget(None, None), other_machine=True)
    _claim_and_release(claims)
    _claim_and_release(claims)  # a baseline is queued already: not a second one
    trials = stored(url).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.WAITING]
    assert trials[1].user_attrs == {BASELINE: True, BASELINE_MACHINE: machine_id(HERE)}
    assert trials[1].system_attrs["fixed_params"] == {"precision": "fp32", "graph_optimization_level": "all",
                                                      "intra_op_num_threads": 2, "intra_op_spinning": True}
    study.optimize(lambda t: 1.0, n_trials=1)  # it runs: this machine has its baseline
    assert run_one(claims)
    assert not [t for t in stored(url).trials if t.state == TrialState.WAITING]
    assert [t.number for t in stored(url).trials if t.user_attrs.get(BASELINE_MACHINE) == machine_id(HERE)] == [1]


def test_another_machines_baseline_waits_for_an_empty_queue_and_replaces_a_failed_one(url):
    study = _baseline_from_another_machine(url)
    study.enqueue_trial({"precision": "int8-dynamic"})  # trial 1: queued before this machine joined
    claims = TrialClaims(context(url), Budget(None, None), other_machine=True)
    _claim_and_release(claims)  # the next ask pops trial 1, not a baseline queued behind it
    assert [t.state for t in stored(url).trials] == [TrialState.COMPLETE, TrialState.WAITING]
    study.optimize(lambda t: 1.0, n_trials=1)
    _claim_and_release(claims)  # the queue is empty now: this machine's baseline is queued
    study.tell(study.ask(), state=TrialState.FAIL)  # trial 2, the baseline, fails
    _claim_and_release(claims)  # a failed baseline is none: another is queued
    trials = stored(url).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.FAIL, TrialState.WAITING]
    assert [t.number for t in trials if t.user_attrs.get(BASELINE_MACHINE) == machine_id(HERE)] == [2, 3]


def test_store_run_settings(url):
    study = handle(url)
    with pytest.raises(UserError, match=r"^--max-trials 0: needs at least 1$"):
        store_run_settings(study, 0, None)
    assert MAX_TRIALS_ATTR not in study.user_attrs
    store_run_settings(study, None, None)
    assert study.user_attrs == {PROTOCOL_ATTR: None}  # no budget stored; workers time with their own protocol
    protocol = LatencyProtocol(warmup=2, max_seconds=3)
    store_run_settings(study, 4, protocol)
    assert study.user_attrs == {MAX_TRIALS_ATTR: 4, PROTOCOL_ATTR: asdict(protocol)}
    store_run_settings(handle(url), None, None)  # a resume that names neither keeps both
    assert stored(url).user_attrs == {MAX_TRIALS_ATTR: 4, PROTOCOL_ATTR: asdict(protocol)}


def test_calibration_ranges_are_shared_through_the_study_once_per_key(url, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "calib-k-minmax.json").write_text(json.dumps({"a": [0, 1]}))
    (cache / "calib-k-entropy.json").write_text(json.dumps({"a": [0, 2]}))
    (cache / "calib-other-minmax.json").write_text("another model's ranges")
    study = handle(url)
    keys = upload_calibration(study, "k")
    assert keys == {"calib/calib-k-minmax.json", "calib/calib-k-entropy.json"}
    shared = {k: v for k, v in stored(url).user_attrs.items() if k.startswith(CALIB_PREFIX)}
    assert shared == {"calib/calib-k-minmax.json": '{"a": [0, 1]}', "calib/calib-k-entropy.json": '{"a": [0, 2]}'}
    (cache / "calib-k-minmax.json").write_text("recomputed elsewhere")
    upload_calibration(handle(url), "k")  # stored once: the first upload stays
    assert stored(url).user_attrs["calib/calib-k-minmax.json"] == '{"a": [0, 1]}'

    reads = []
    study = handle(url)
    study._storage.get_study_user_attrs = lambda sid, _get=study._storage.get_study_user_attrs: reads.append(1) or _get(sid)
    assert upload_calibration(study, "k", known=keys) == keys and reads == []  # all known stored: no read
    (cache / "calib-k-new.json").write_text("a new range")
    assert upload_calibration(study, "k", known=keys) == keys | {"calib/calib-k-new.json"} and reads == [1]
    assert stored(url).user_attrs["calib/calib-k-new.json"] == "a new range"

    for f in cache.iterdir():
        f.unlink()  # another host: an empty cache
    (cache / "calib-k-entropy.json").write_text("computed here")
    assert download_calibration(stored(url).user_attrs) == keys | {"calib/calib-k-new.json"}
    assert sorted(os.listdir(cache)) == ["calib-k-entropy.json", "calib-k-minmax.json", "calib-k-new.json"]
    assert (cache / "calib-k-minmax.json").read_text() == '{"a": [0, 1]}'
    assert (cache / "calib-k-entropy.json").read_text() == "computed here"  # a local file is not overwritten


def test_a_trial_left_running_by_a_worker_killed_inside_ask_is_failed_and_retried(tmp_path):
    """Found by bench/kill_loop_bench.py: killed between Optuna's create_new_trial and its first heartbeat, a
    worker leaves a RUNNING trial with no heartbeat (fail_stale_trials never sees it) and no WORKER attr."""
    from datetime import timedelta

    from tuner.run.claims import fail_unclaimed
    from tuner.search.record import FAIL_REASON, WORKER

    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/s.db", heartbeat_interval=1, grace_period=4,
                                         failed_trial_callback=optuna.storages.RetryFailedTrialCallback(max_retry=1))
    study = optuna.create_study(study_name="s", storage=storage)
    orphan = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})  # RUNNING, no heartbeat, no worker
    alive = study.ask()
    alive.set_user_attr(WORKER, "host:1")  # the objective's first write: a worker that runs it
    start = study.trials[orphan.number].datetime_start
    assert fail_unclaimed(study, 4.0, now=lambda: start + timedelta(seconds=4)) == []  # within the grace period
    assert fail_unclaimed(study, 4.0, now=lambda: start + timedelta(seconds=5)) == [orphan.number]
    by_number = {t.number: t for t in study.trials}
    assert by_number[orphan.number].state == TrialState.FAIL
    assert "died as Optuna created it" in by_number[orphan.number].user_attrs[FAIL_REASON]
    assert by_number[alive.number].state == TrialState.RUNNING
    retry = [t for t in study.trials if t.system_attrs.get("failed_trial") == orphan.number]
    assert len(retry) == 1 and retry[0].state == TrialState.WAITING and retry[0].params == {"x": orphan.params["x"]}
    assert fail_unclaimed(study, 4.0, now=lambda: start + timedelta(seconds=60)) == []  # once
