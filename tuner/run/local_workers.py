"""Run a study's trials in this process or in N local worker processes, under one shared budget.

Every worker is a separate process with its own sampler (the study's seed, each trial seeded by its place) on the same storage.
Builds run in parallel; timing stays exclusive per device through the lock in tuner.store.locks. The
parent hands out trials one at a time from a shared counter, so a budget of N trials runs exactly
N, and it shows the progress of all workers, which report each finished trial's number.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_mod
import signal
import time
from collections.abc import Callable

from optuna.trial import TrialState

from ..errors import GATE, TrialFailure, install_stops
from ..execute.jobs import Evaluator
from ..execute.orphans import end_with_parent
from ..problem.spec import LoadedSpec
from ..search.enqueue import baseline_config
from ..search.objective import Objective
from ..search.record import WORKER
from ..search.settings import allowed_metrics
from ..search.study import StudyContext
from ..search.trials import is_feasible, speed_key
from .claims import TrialClaims, worker_name
from .join import join_study
from .options import TuneOptions, engines_dir, trials_log

_SPAWN = mp.get_context("spawn")  # never fork a process that may hold ONNX Runtime threads


class Budget:
    """Trials left and a deadline, shared by the workers of one run. clock: wall-clock seconds, the same in
    every worker process (time.time; a test passes its own)."""

    def __init__(self, n_trials: int | None, timeout: float | None, clock: Callable[[], float] = time.time):
        self._left = _SPAWN.Value("i", -1 if n_trials is None else n_trials)
        self._clock = clock
        self._deadline = None if timeout is None else clock() + timeout
        self._stop = _SPAWN.Event()

    def stopped(self) -> bool:
        """A stop was asked or the deadline passed."""
        return self._stop.is_set() or (self._deadline is not None and self._clock() >= self._deadline)

    def take(self) -> bool:
        """Claim one trial; False once the budget is spent, the deadline passed or a stop was asked."""
        if self.stopped():
            return False
        with self._left.get_lock():
            if self._left.value == 0:
                return False
            if self._left.value > 0:
                self._left.value -= 1
        return True

    def stop(self) -> None:
        self._stop.set()


class StopAfterNoImprovement:
    """Stop once N finished trials in a row have not improved the best feasible latency."""

    def __init__(self, patience: int, stop: Callable[[], None]):
        self.patience, self._stop = patience, stop
        self.best = float("inf")
        self.since = 0

    def __call__(self, study, trial) -> None:
        if trial.state == TrialState.COMPLETE and is_feasible(trial) and speed_key(trial) < self.best:
            self.best, self.since = speed_key(trial), 0
        else:
            self.since += 1
        if self.since >= self.patience:
            self._stop()


def trial_loop(ctx: StudyContext, opts: TuneOptions, budget: Budget, callbacks: list, claims=None,
               most: int | None = None) -> None:
    """One trial per optimize call, each claimed from the budget first (heartbeats need optimize),
    then from the study-wide budget under a database lock (run.claims.TrialClaims). most: at most this many
    trials in this call (tune's first phase: the runtimes' defaults, before the analysis)."""
    paired = ctx.settings.paired
    # One child process for the trials of this worker, kept while they succeed: it loads the problem once
    # (the parent's checked spec: no checker, no hash again) instead of once per trial; a trial that
    # crashes or hangs still fails alone, and the next one starts a fresh child.
    engines = engines_dir(ctx.study.study_name, ctx.url, opts.engines_dir)
    evaluator = Evaluator(ctx.problem.loaded, opts.trial_timeout, opts.protocol, persistent=True, study=ctx.study.study_name,
                          baseline=baseline_config(ctx) if paired else None, when_busy=opts.when_busy,
                          log_path=trials_log(ctx.study.study_name, engines) if opts.quiet else None)
    objective = Objective(ctx, evaluator, engines, opts.keep_engines,
                          trial_attrs={WORKER: worker_name()})
    claims = claims or TrialClaims(ctx, budget)
    exhausted = getattr(ctx.study.sampler, "is_exhausted", None)  # the grid sampler's end
    ran = 0
    try:
        while (most is None or ran < most) and budget.take() and claims.acquire():
            ran += 1
            # a stop inside Optuna's ask or tell waits for the objective (which fails the trial with its
            # reason) or for the trial's end; the claim (a lock wait) stays outside, where a stop acts at once
            with GATE.deferred():
                try:
                    ctx.study.optimize(claims.wrap(objective), n_trials=1, catch=(TrialFailure,),
                                       callbacks=callbacks, gc_after_trial=False)
                finally:
                    claims.release()
            if exhausted is not None and exhausted(ctx.study):
                budget.stop()
    finally:
        claims.close()
        evaluator.close()


def _worker_main(url: str, study: str, opts: TuneOptions, index: int, budget: Budget, done: mp.Queue,
                 loaded: LoadedSpec) -> None:
    """loaded: the problem as the tuning process loaded it, trusted (no requirement parsed, no model hashed, no
    space checked again here); its requirement is also what the user's command allowed, not what the database names
    now (it may have been rewritten since)."""
    end_with_parent(mp.parent_process().pid)  # a worker never outlives the tuning process, even one killed by kill -9
    install_stops()
    try:
        allowed = allowed_metrics(opts.allow_metrics, loaded.requirement)  # names only: join_study checks them
        ctx, _ = join_study(url, study, worker=index, allow_metrics=allowed, loaded=loaded)
        trial_loop(ctx, opts, budget, [lambda s, t: done.put(("trial", t.number))])
    except KeyboardInterrupt:
        pass  # the trial it ran is already failed with its reason
    except Exception as exc:  # noqa: BLE001  a worker that cannot run says why, then the others go on
        done.put(("error", f"worker {index}: {type(exc).__name__}: {exc}"))


def run_parallel(ctx: StudyContext, opts: TuneOptions, jobs: int, budget: Budget, callbacks: list) -> list[str]:
    """Start `jobs` workers on the study, feed their finished trials to callbacks, wait for all.
    Returns the errors of workers that could not run. The calling thread starts the workers and waits
    for them here: their parent-death signal (tuner.execute.orphans) follows that thread, which outlives them."""
    done: mp.Queue = _SPAWN.Queue()
    procs = [_SPAWN.Process(target=_worker_main, args=(ctx.url, ctx.study.study_name, opts, i, budget, done,
                                                       ctx.problem.loaded))
             for i in range(jobs)]
    for p in procs:
        p.start()
    errors: list[str] = []
    try:
        while any(p.is_alive() for p in procs) or not done.empty():
            try:
                kind, value = done.get(timeout=0.5)
            except queue_mod.Empty:
                continue
            if kind == "error":
                errors.append(value)
                continue
            trial = next(t for t in ctx.study.get_trials(deepcopy=False) if t.number == value)
            for cb in callbacks:
                cb(ctx.study, trial)
    except KeyboardInterrupt:
        budget.stop()
        for p in procs:  # workers fail their running trial on SIGINT; give them the time to say so
            if p.is_alive():
                _interrupt(p.pid)
        for p in procs:
            p.join(30)
        raise
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
    return errors


def _interrupt(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        pass
