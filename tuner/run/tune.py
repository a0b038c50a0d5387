"""`tuner tune`: open or resume the study, recover from a dead run, optimize, then select the winner."""
from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import time
from dataclasses import dataclass, replace

import optuna
from optuna.trial import TrialState

from ..errors import GATE, TrialFailure, UserError
from ..execute.timing import ALONE_SECONDS
from ..inputs.user_paths import check_writable_dir
from ..report.progress import TrialProgress
from ..report.winner_facts import winner_lines
from ..search.enqueue import enqueue_defaults, enqueue_float32_defaults, enqueue_found, enqueue_greedy
from ..search.record import BASELINE, FAIL_REASON, RETRY_OF, StoredStudy, StoredTrial, Winner
from ..search.study import StudyContext
from ..search.trials import (
    baseline_modes,
    baseline_trial,
    best_feasible,
    is_first_look,
    latency_of,
    speedup_of,
    was_busy,
)
from ..store.optuna_private import storage_of, trial_id
from ..store.storage import StorageURL
from ..winner.select import select_winner
from .claims import store_run_settings
from .disk import disk_warning
from .local_workers import Budget, StopAfterNoImprovement, run_parallel, trial_loop
from .options import TuneOptions, engines_dir, trials_log
from .prepare import analysis_due, analyze_study, open_study


@dataclass
class TuneResult:
    study: optuna.Study
    winner: dict | None
    trials_run: int


@contextlib.contextmanager
def study_run_lock(url: str, study: str):
    """Held while this process tunes a study in a local file. Yields True when nobody else holds it,
    i.e. trials left RUNNING are from a dead process."""
    lock = StorageURL(url).run_lock(study)
    if lock is None:  # database servers: heartbeats find the dead instead
        yield False
        return
    with open(lock, "a+") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def recover_stale_trials(study: optuna.Study) -> list[int]:
    """Fail trials a killed process left RUNNING and queue their configs once more."""
    stale = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    storage = storage_of(study)
    for t in stale:
        with GATE.deferred():  # failed and queued again, or neither
            # the reason first: a finished trial's attrs cannot change
            storage.set_trial_user_attr(trial_id(t), FAIL_REASON, "the tuning process died during this trial")
            # as Optuna fails a stale trial (storages._heartbeat.fail_stale_trials): in the storage, not by
            # study.tell, whose sampler.after_trial would take in a trial that has no result (the grid sampler's
            # calls study.stop when the trial held its last point to visit: an error outside optimize)
            with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
                storage.set_trial_state_values(trial_id(t), TrialState.FAIL)
            rec = StoredTrial.of(t)
            if rec.retry_of is None:
                study.enqueue_trial(t.params, user_attrs={RETRY_OF: t.number} | ({BASELINE: True} if rec.baseline else {}))
    return [t.number for t in stale]


def run_trials(ctx: StudyContext, opts: TuneOptions, budget: Budget | None = None, most: int | None = None,
               done: int = 0) -> int:
    """Run the budget in this process (--jobs 1) or in opts.jobs worker processes; returns trials run. most: at
    most this many, in this process (the runtimes' defaults before the analysis); done: trials this run made
    before (the progress counts on from them)."""
    budget = budget or Budget(opts.n_trials, opts.timeout)
    callbacks = []
    if opts.stop_after_no_improvement:
        callbacks.append(StopAfterNoImprovement(opts.stop_after_no_improvement, budget.stop))
    with TrialProgress(opts.n_trials, opts.timeout, live=opts.progress, quiet=opts.quiet,
                       log_path=trials_log(opts.study, engines_dir(opts.study, ctx.url)), jobs=opts.jobs,
                       done=done) as progress:
        if opts.jobs > 1 and most is None:
            for error in run_parallel(ctx, opts, opts.jobs, budget, [progress] + callbacks):
                print(f"tuner: {error}", file=sys.stderr)
        else:
            trial_loop(ctx, opts, budget, [progress] + callbacks, most=most)
    return progress.done - done


def defaults_waiting(study: optuna.Study) -> int:
    """The queued trials of each runtime's defaults (the baseline and the other backends', and in float32 where
    they missed the requirement), run before the analysis."""
    return sum(1 for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)) if is_first_look(t))


def capped_jobs(jobs: int, over_cores: bool, cores: int | None = None) -> int:
    """More workers than cores only make builds compete (timing is one at a time anyway): capped, said once."""
    cores = cores or os.cpu_count() or 1
    if jobs <= cores or over_cores:
        return jobs
    print(f"note: --jobs {jobs} is more than this machine's {cores} cores: running {cores} workers "
          f"(--jobs-over-cores runs all {jobs}; timing stays one at a time either way)", file=sys.stderr)
    return cores


def tune_study(opts: TuneOptions) -> TuneResult:
    """`tuner tune` (and tuner.tune, the Python API): open or resume the study, run its trials, select the winner."""
    if opts.n_trials is None and opts.timeout is None and opts.max_trials is None:
        raise UserError("give a budget: --n-trials N and/or --timeout 30m (or a study-wide --max-trials N)")
    if opts.n_trials is not None and opts.n_trials < 1:
        raise UserError(f"--n-trials {opts.n_trials}: needs at least 1")
    if opts.jobs < 1:
        raise UserError(f"--jobs {opts.jobs}: needs at least 1")
    if opts.jobs > 1 and opts.sampler_object is not None:  # Optuna stores no sampler: a worker process has none
        raise UserError(f"jobs={opts.jobs} with a sampler object: each worker process samples for itself and "
                        "cannot be handed this one; use jobs=1, or a sampler name (sampler='tpe')")
    if not opts.trial_timeout > 0:
        raise UserError(f"--trial-timeout {opts.trial_timeout}: needs more than 0 seconds")
    if opts.top_k < 1:
        raise UserError(f"--top-k {opts.top_k}: needs at least 1")
    if opts.protocol is not None and not opts.protocol.max_seconds > 0:
        raise UserError(f"--max-timing-s {opts.protocol.max_seconds}: needs more than 0 seconds")
    if opts.engines_dir:
        check_writable_dir(opts.engines_dir, "--engines-dir")  # else every trial would fail on it
    ctx = open_study(opts, defer_analysis=True)  # says the problem's notes
    opts = replace(opts, jobs=capped_jobs(opts.jobs, opts.jobs_over_cores))
    store_run_settings(ctx.study, opts.max_trials, opts.protocol)  # for `tuner worker` on other hosts
    low = disk_warning(opts, ctx.problem.model.proto.ByteSize(), engines_dir(opts.study, ctx.url, opts.engines_dir))
    if low:
        print(low, file=sys.stderr)
    budget = Budget(opts.n_trials, opts.timeout)  # the analysis is inside it: --timeout bounds the whole study
    started = time.monotonic()
    with study_run_lock(ctx.url, opts.study) as alone:
        if alone:
            recover_stale_trials(ctx.study)
        enqueue_defaults(ctx)
        # each runtime's defaults first (the figures every speedup is read against, within the first minute),
        # then the analysis, whose candidates are queued as each is found, then the search
        due = analysis_due(ctx)
        ran = run_trials(ctx, opts, budget, most=defaults_waiting(ctx.study)) if due else 0
        # a runtime whose defaults missed the requirement, in float32 (once per study, a resumed one's too)
        if enqueue_float32_defaults(ctx) and due:
            ran += run_trials(ctx, opts, budget, most=defaults_waiting(ctx.study), done=ran)
        if due:
            deadline = None if opts.timeout is None else started + opts.timeout
            ctx = analyze_study(ctx, opts, deadline, on_ranking=enqueue_greedy)
        enqueue_found(ctx, opts.enqueue)
        ran += run_trials(ctx, opts, budget, done=ran)
    stored = StoredStudy.of(ctx.study).winner  # a selection before this run's (--no-select)
    winner = stored.stored if stored is not None else None
    if opts.select:
        # the deployment check's processes time no longer than --max-timing-s, where it is shorter
        alone_s = min(ALONE_SECONDS, opts.protocol.max_seconds) if opts.protocol else ALONE_SECONDS
        try:
            winner = select_winner(ctx.study, ctx.problem, opts.top_k, artifacts=opts.artifacts,
                                   keep=opts.keep_artifacts or ("all" if opts.keep_engines else None),
                                   alone_seconds=alone_s)
        except TrialFailure as exc:  # the trials are safe in the study; selection can be run again
            raise UserError(f"selecting the winner failed ({exc}); the study's trials are kept: "
                            f"run `tuner select --study {opts.study}` again") from None
    return TuneResult(ctx.study, winner, ran)


def describe_result(result: TuneResult) -> list[str]:
    """The closing lines of `tune` and `select`."""
    study, winner = result.study, result.winner
    trials = study.get_trials(deepcopy=False)  # read once: every line of the same moment
    # the winner as handed back (the study's own record where selection has not run in this call)
    stored = StoredStudy.of(study)
    if winner:
        stored = replace(stored, winner=Winner.from_attrs(winner), selected=True)
    lines = winner_lines(stored, study.study_name)
    bf = best_feasible(trials)
    if bf is not None and (not winner or bf.number != winner["trial"]):
        up = speedup_of(bf, baseline_trial(trials))
        lines.append(f"fastest feasible in the search: trial {bf.number}, "
                     + (f"{up:.2f}x the baseline ({latency_of(bf):.2f} ms)" if up else f"{latency_of(bf):.2f} ms"))
    modes = baseline_modes(trials)
    if modes:
        lines.append(f"warning: {modes}")
    busy = sum(1 for t in trials if was_busy(t))
    if busy:
        lines.append(f"warning: {busy} trial(s) were timed while other processes kept the machine busy "
                     f"(tuner status --study {study.study_name} lists them; --when-busy wait holds timings back)")
    return lines
