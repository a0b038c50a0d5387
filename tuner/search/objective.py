"""The objective of one trial: suggest a config, reuse an earlier measurement of the same build, or
have the evaluator build and measure it; report latency and error, and the requirement as constraints."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from typing import Protocol

import optuna
from optuna.trial import TrialState

from ..errors import GATE, Terminated
from ..inputs.configs import normalize, route_choice, trial_chooser
from ..measure.guard import BaselineBand
from ..measure.machine import same_machine
from .attrs import write_trial
from .failures import BUILD_CONSTRAINT, KNOWN_FAILURE, is_deterministic, is_timing_timeout, known_failure, record_failure
from .record import BUILD_KEY, CONFIG, FAIL_REASON, LOCK_WAIT_S, MACHINE, REUSED_FROM, StoredTrial, TrialRecord
from .samplers import grid_space
from .settings import StudySettings
from .study import StudyContext
from .trials import is_feasible, is_trusted, relative_of, trials_of_this_trial

GIVE_UP = 1.5  # a candidate known to be this much slower than the best feasible so far is not timed on


class CandidateEvaluator(Protocol):
    """What the objective needs of an evaluator (tuner.execute.jobs.Evaluator): build and measure one config."""

    def measure(self, config: dict, out_dir: str, band: BaselineBand | None = None,
                give_up_above: float | None = None) -> TrialRecord: ...


def baseline_band(trials: list, machine: dict) -> BaselineBand | None:
    """The band of the baseline windows of the study's paired trials on this machine, disturbed ones and
    those of a slow run (one baseline run, not a window) left out."""
    recs = [StoredTrial.of(t) for t in trials]
    medians = [r.baseline_latency["median_ms"] for r in recs
               if r.baseline_latency and not r.copied and not r.disturbed and r.stopped != "slow run"
               and same_machine(r.machine, machine)]
    return BaselineBand.from_history(medians)


def give_up_ratio(trials: list) -> float | None:
    """GIVE_UP x the best trusted feasible paired ratio so far; None before there is one."""
    ratios = [relative_of(t) for t in trials if is_feasible(t) and is_trusted(t) and relative_of(t) is not None]
    return GIVE_UP * min(ratios) if ratios else None


def build_key(settings: StudySettings, config: dict) -> str:
    """Everything a build depends on: model, data, config, backend and library versions."""
    payload = {"model": settings.model_hash, "data": settings.data_hash, "config": config,
               "versions": settings.machine["versions"], "backend": settings.backend}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:20]


class Objective:
    """Called by Optuna once per trial. A failure (TrialFailure from the evaluator) fails only the trial."""

    def __init__(self, ctx: StudyContext, evaluator: CandidateEvaluator, engines_dir: str, keep_engines: bool = False,
                 trial_attrs: dict | None = None):
        self.ctx = ctx
        self.trial_attrs = trial_attrs or {}  # what every trial of this worker records (who ran it)
        self.evaluator = evaluator
        self.engines_dir = engines_dir
        self.keep_engines = keep_engines
        self.grid_names = set(grid_space(ctx.problem.space)) if ctx.settings.sampler == "grid" else None

    def __call__(self, trial: optuna.Trial):
        with GATE.opened():  # a stop that came during Optuna's ask lands here; one during the trial, at once
            try:
                return self._run(trial)
            except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM, wherever in the trial: Optuna fails it and re-raises
                how = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted (Ctrl-C)"
                with GATE.deferred():
                    trial.set_user_attr(FAIL_REASON, f"{how} during this trial")
                raise

    def _run(self, trial: optuna.Trial):
        ctx = self.ctx
        with GATE.deferred():  # each suggestion is a storage write: a stop waits for them (a few ms)
            config = normalize(ctx.problem.space, trial_chooser(trial, self.grid_names), ctx.problem.graph_nodes,
                               ctx.settings.rankings)
        key = build_key(ctx.settings, config)
        write_trial(trial, {**self.trial_attrs, CONFIG: config, BUILD_KEY: key, MACHINE: ctx.settings.machine})
        done = trials_of_this_trial(ctx.study, (TrialState.COMPLETE,))  # the read the sampler made for this trial
        prior = self._completed_with(done, key, trial.number)
        if prior is not None:
            first = StoredTrial.of(prior).reused_from
            reused = {REUSED_FROM: prior.number if first is None else first}
            return self._report(trial, TrialRecord.from_trial(prior).copied(), reused)
        choice = route_choice(ctx.problem.space, config)
        study_attrs = ctx.study.user_attrs  # one read for both lookups
        seen = known_failure(study_attrs, choice) or known_failure(study_attrs, config)
        if seen is not None:
            self._prune_known_failure(trial, seen)
        out_dir = os.path.join(self.engines_dir, f"trial-{trial.number}")
        try:
            rec = self.evaluator.measure(config, out_dir, baseline_band(done, ctx.settings.machine),
                                         give_up_ratio(done))
        except Exception as exc:
            trial.set_user_attr(FAIL_REASON, str(exc))
            if is_deterministic(exc):
                record_failure(ctx.study, choice, trial.number, str(exc))
            elif is_timing_timeout(exc):
                record_failure(ctx.study, config, trial.number, str(exc))
            raise
        finally:
            waited = self.evaluator.lock_waits.take()
            if waited >= 0.1:  # for another study's timing: the progress ETA leaves it out
                trial.set_user_attr(LOCK_WAIT_S, round(waited, 1))
            if not self.keep_engines:
                shutil.rmtree(out_dir, ignore_errors=True)
        if not self.keep_engines:
            rec.engine_dir = None
        return self._report(trial, rec)

    def _prune_known_failure(self, trial: optuna.Trial, seen: dict):
        """Not built again: pruned, and infeasible by every bound (TPE then ranks it last)."""
        bounds = dict.fromkeys(self.ctx.problem.requirement.violations({}), 1e30)
        write_trial(trial, {KNOWN_FAILURE: seen}, bounds | {BUILD_CONSTRAINT: 1.0})
        raise optuna.TrialPruned(f"this route failed to build in trial {seen['trial']}: {seen['reason']}")

    def _report(self, trial: optuna.Trial, rec: TrialRecord, extra_attrs: dict | None = None):
        write_trial(trial, rec.to_attrs() | (extra_attrs or {}), rec.violations)
        error = min(float(rec.metrics.get(self.ctx.problem.requirement.primary_metric, 1e30)), 1e30)
        # Paired timing: the objective is the latency relative to the baseline timed in the same window; a
        # window whose baseline fell above its band scores the candidate against the band's median instead.
        latency = rec.relative_latency if rec.relative_latency is not None else rec.median_ms
        if rec.disturbed:
            latency = rec.median_ms / rec.baseline_guard["band"]["median_ms"]
        values = {"latency": latency, "error": error}
        out = [values[o] for o in self.ctx.objectives]
        return out if len(out) > 1 else out[0]

    def _completed_with(self, done: list, key: str, number: int):
        for t in done:
            # a latency measured on another machine is no measurement for this one
            rec = StoredTrial.of(t)
            if rec.build_key == key and t.number != number and same_machine(rec.machine, self.ctx.settings.machine):
                return t
        return None
