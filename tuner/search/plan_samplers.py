"""TensorRT's tuning strategies (fast, full, mixed) as Optuna samplers, for any backend's space:
`--sampler fast|full|mixed` (tuner.search.samplers.make_sampler).

- `FastSampler`, `FullSampler`, `MixedSampler` run the plans of tuner.search.plans in order, each
  plan once across every worker sharing the study; `is_exhausted(study)` says when all ran (the
  tuner's trial loop then stops).

A trial takes a plan by storing it in its system attrs (`plan:index`, `plan:key`, `plan:config`).
Which plans are taken is read from the study on every trial, so the samplers keep no state (only
caches of what finished trials hold) and work across processes and resumes. A plan counts as taken
by any trial of the study whose config (normalized knob values; other parameters at their default)
equals it: a trial of this sampler, an enqueued trial (its fixed params), a retried one, or a
finished trial of another sampler.

Optuna internals relied on (Optuna 5.1, through store.optuna_private): the stored trials read as
GridSampler reads them, trial ids, `trial.system_attrs` read from the storage at
suggest time, `fixed_params` in the system attrs of an enqueued trial, and
RetryHeartbeatStaleTrialCallback copying a failed trial's system attrs to its retry.
"""
from __future__ import annotations

import copy
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from ..inputs.space import Param
from ..store.optuna_private import distribution_contains, storage_of, stored_trials, trial_id
from .plans import Config, activation, active_config, canon, fast_plans_with_knobs, knobs_of, plan_key, plans_fast, plans_full
from .trials import is_feasible

INDEX_ATTR = "plan:index"  # position of the plan in the sampler's list (analysis only)
KEY_ATTR = "plan:key"  # canonical JSON of the plan: what identifies a plan across workers
CONFIG_ATTR = "plan:config"  # the plan itself: what sample_independent answers
STRATEGY_ATTR = "plan:strategy"
NONE_ATTR = "plan:none"  # set when every plan was taken: the trial is pruned at its first suggest

_logger = optuna.logging.get_logger(__name__)


class PlanSampler(BaseSampler):
    """Runs a list of plans in order, one trial each, across every worker of the study.

    Subclasses give the list (`plan_list`). before_trial gives a new trial the first plan no trial
    holds, claims it by writing it to the trial's system attrs, then reads the study again and gives
    the plan up (and picks again after a random pause) if another trial holds it too: after its
    last write each holder saw no other, so no two trials keep the same plan. A trial that is
    enqueued (fixed params) or retried keeps what it has: its fixed params win, it holds the plan
    equal to its config if any, and every parameter it does not fix is answered with its default.
    When every plan is taken (a race between workers at the end, or a run past `is_exhausted`) the
    trial gets no plan and is pruned (optuna.TrialPruned) at its first suggest instead of building
    a duplicate; after_trial stops `study.optimize` once `is_exhausted`.

    Args:
        params: the space's parameters (tuner.inputs.space.Space.params).
        defaults: defaults of parameters not in `params` (per-layer ones, e.g. `keep_float/top_k`);
            otherwise a categorical with False among its choices answers False, other categoricals
            their first choice, numbers their low end.
        max_claim_attempts: claims given up before the trial keeps its plan anyway (with a warning).
    """

    strategy = "plan"

    def __init__(self, params: Sequence[Param], *, defaults: Mapping[str, Any] | None = None,
                 max_claim_attempts: int = 50) -> None:
        self.params = list(params)
        self.knobs = knobs_of(self.params)
        self._knob_names = {p.name for p in self.knobs}
        self._param_defaults = {p.name: canon(p, p.default) for p in self.params}
        self._defaults = dict(defaults or {})
        self._max_claim_attempts = max_claim_attempts
        self._rng = random.Random()  # seeded by the OS: workers must not pause in step
        self._finished_configs: dict[int, Config | None] = {}
        self.contested = 0  # claims given up because another trial held the plan too (for tests)

    # -- what subclasses provide

    def plan_list(self, study: Study, trials: Sequence[FrozenTrial]) -> tuple[list[Config], bool]:
        """(the plans known now, whether that list is final); not final means more plans will
        follow once the trials running now finish (mixed's second phase)."""
        raise NotImplementedError

    # -- reading the study

    def default_for(self, name: str, distribution: BaseDistribution | None = None) -> Any:
        """The value a parameter takes when no plan names it (see the class docstring)."""
        if name in self._param_defaults:
            return self._param_defaults[name]
        if name in self._defaults:
            return self._defaults[name]
        if isinstance(distribution, CategoricalDistribution):
            return False if any(c is False for c in distribution.choices) else distribution.choices[0]
        if distribution is not None and hasattr(distribution, "low"):
            return distribution.low  # type: ignore[attr-defined]
        return False  # a per-layer boolean

    def config_of(self, values: Mapping[str, Any],
                  distributions: Mapping[str, BaseDistribution] | None = None) -> Config | None:
        """The knob config of a trial with these parameter values (missing knobs at default), or
        None when a non-knob parameter is not at its default (that build is no plan)."""
        for name, v in values.items():
            if name not in self._knob_names:
                d = self.default_for(name, (distributions or {}).get(name))
                if v != d or isinstance(v, bool) != isinstance(d, bool):
                    return None
        return active_config(self.knobs, values)

    def trial_config(self, t: FrozenTrial) -> Config | None:
        """The config a trial holds: its plan, else its fixed params (enqueued), else, once
        finished, its params; None for a trial still choosing or off every plan."""
        if trial_id(t) in self._finished_configs:
            return self._finished_configs[trial_id(t)]
        attrs = t.system_attrs
        if attrs.get(KEY_ATTR) is not None:
            config: Config | None = attrs[CONFIG_ATTR]
        elif "fixed_params" in attrs:
            config = self.config_of(attrs["fixed_params"])
        elif t.state.is_finished() and t.params:
            config = self.config_of(t.params, t.distributions)
        else:
            config = None
        if t.state.is_finished():
            self._finished_configs[trial_id(t)] = config
        return config

    def holders(self, trials: Sequence[FrozenTrial], exclude: int | None = None) -> dict[str, list[FrozenTrial]]:
        """Plan key -> the trials holding it (any state), leaving out the trial with id `exclude`."""
        out: dict[str, list[FrozenTrial]] = {}
        for t in trials:
            if trial_id(t) != exclude:
                config = self.trial_config(t)
                if config is not None:
                    out.setdefault(plan_key(config), []).append(t)
        return out

    @staticmethod
    def _trials(study: Study) -> list[FrozenTrial]:
        # Straight from the storage, as GridSampler does (pruners may filter study.get_trials).
        return stored_trials(study)

    def is_exhausted(self, study: Study, trials: Sequence[FrozenTrial] | None = None) -> bool:
        """True when the plan list is final and a trial (running or finished) holds every plan.
        trials: the study's trials when the caller has them (default: read from the storage)."""
        trials = self._trials(study) if trials is None else trials
        plans, final = self.plan_list(study, trials)
        held = self.holders(trials)
        return final and all(plan_key(p) in held for p in plans)

    # -- BaseSampler

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return {}

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        """Give the trial its plan (see the class docstring)."""
        storage, tid = storage_of(study), trial_id(trial)
        attrs = trial.system_attrs
        if attrs.get(KEY_ATTR) is not None:  # retried (RetryHeartbeatStaleTrialCallback copies attrs)
            return
        if "fixed_params" in attrs:  # enqueued: its fixed params win; record the plan it equals
            config = self.config_of(attrs["fixed_params"])
            if config is not None:
                plans, _ = self.plan_list(study, self._trials(study))
                keys = [plan_key(p) for p in plans]
                key = plan_key(config)
                self._write(storage, tid, keys.index(key) if key in keys else None, config)
            return
        for attempt in range(1, self._max_claim_attempts + 1):
            trials = self._trials(study)
            plans = self._wait_for_plans(study, trials)
            held = self.holders(trials, exclude=tid)
            index = next((i for i, p in enumerate(plans or []) if plan_key(p) not in held), None)
            if plans is None or index is None:
                why = "every plan is taken" if plans is not None else "a queued trial comes first"
                _logger.warning(f"{type(self).__name__}: {why}; trial {trial.number} is pruned.")
                storage.set_trial_system_attr(tid, NONE_ATTR, True)
                return
            config = plans[index]
            self._write(storage, tid, index, config)  # the claim, then check that no other trial holds it
            if plan_key(config) not in self.holders(self._trials(study), exclude=tid):
                return
            if attempt == self._max_claim_attempts:
                _logger.warning(f"{type(self).__name__}: trial {trial.number} keeps plan {index} after "
                                f"{attempt} contested claims; it may run twice.")
                return
            storage.set_trial_system_attr(tid, KEY_ATTR, None)  # give it up, then pick again
            self.contested += 1
            _logger.debug(f"{type(self).__name__}: plan {index} contested for trial {trial.number}; picking again.")
            time.sleep(self._rng.uniform(0.0, 0.02 * attempt))

    def _wait_for_plans(self, study: Study, trials: list[FrozenTrial]) -> list[Config] | None:
        """The plans to choose from now (PlanSampler: the list as it is; MixedSampler may wait);
        None: give this trial no plan (pruned)."""
        return self.plan_list(study, trials)[0]

    def _write(self, storage, trial_id: int, index: int | None, config: Config) -> None:
        storage.set_trial_system_attr(trial_id, STRATEGY_ATTR, self.strategy)
        storage.set_trial_system_attr(trial_id, INDEX_ATTR, index)
        storage.set_trial_system_attr(trial_id, CONFIG_ATTR, config)
        storage.set_trial_system_attr(trial_id, KEY_ATTR, plan_key(config))  # last: the claim

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        """The trial's planned value, or the parameter's default when its plan does not name it.
        Raises ValueError when the distribution does not accept it (space and objective disagree),
        optuna.TrialPruned when the trial found every plan taken."""
        attrs = trial.system_attrs  # read from the storage by Optuna's Trial (_LazyTrialSystemAttrs)
        if attrs.get(NONE_ATTR):
            raise optuna.TrialPruned("every plan of the sampler is taken")
        plan = attrs.get(CONFIG_ATTR) if attrs.get(KEY_ATTR) is not None else None
        value = (plan or {}).get(param_name, self.default_for(param_name, param_distribution))
        try:
            ok = distribution_contains(param_distribution, value)
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"{type(self).__name__}: {param_name}={value!r} is not in {param_distribution}; "
                             "the sampler's params and the objective's suggestions disagree")
        return value

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        """Stop study.optimize once every plan is taken (ignored outside optimize, as for ask/tell).
        Optuna stores the trial's state after this call, so the trial is counted as finished here."""
        done = copy.copy(trial)
        done.state, done.values = state, values
        trials = [done if trial_id(t) == trial_id(trial) else t for t in self._trials(study)]
        if self.is_exhausted(study, trials):
            try:
                study.stop()
            except RuntimeError:
                pass


class FastSampler(PlanSampler):
    """TensorRT's `fast`: plans_fast(params), in that order."""

    strategy = "fast"

    def __init__(self, params: Sequence[Param], **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self.plans = plans_fast(self.params)

    def plan_list(self, study: Study, trials: Sequence[FrozenTrial]) -> tuple[list[Config], bool]:
        return self.plans, True


class FullSampler(PlanSampler):
    """TensorRT's `full`: plans_full(params, knobs), baseline first."""

    strategy = "full"

    def __init__(self, params: Sequence[Param], *, knobs: Iterable[str] | None = None, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self.plans = plans_full(self.params, knobs)

    def plan_list(self, study: Study, trials: Sequence[FrozenTrial]) -> tuple[list[Config], bool]:
        return self.plans, True


class MixedSampler(PlanSampler):
    """TensorRT's `mixed`: the fast plans, then, once every fast plan has finished, plans_full over
    the knobs that helped (not repeating a fast plan). A knob helped when one of its fast trials is
    feasible and its latency (first objective value) is below the baseline's times (1 - margin)
    (see `helped` for knobs whose parents had to change).

    Args:
        margin: the noise margin (0.02: 2% faster than the baseline).
        poll_s: how often a new trial re-reads the study while fast trials are still running.
        wait_s: how long it waits for them at most; then the second phase is computed from the fast
            trials finished so far (another worker may then compute a different one).
        clock, sleep: what the wait is timed with (a test passes its own, to know when a trial waits).
    """

    strategy = "mixed"

    def __init__(self, params: Sequence[Param], *, margin: float = 0.02, poll_s: float = 1.0,
                 wait_s: float = 3600.0, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self.fast = fast_plans_with_knobs(self.params)
        self.fast_plans = [c for _, c in self.fast]
        self.margin, self.poll_s, self.wait_s = margin, poll_s, wait_s
        self._clock, self._sleep = clock, sleep
        self._second: dict[tuple[str, ...], list[Config]] = {}  # helped knobs -> second phase

    def fast_done(self, trials: Sequence[FrozenTrial]) -> bool:
        """Every fast plan has a complete trial, or trials that all finished (pruned or failed)."""
        held = self.holders(trials)
        return all(
            any(t.state == TrialState.COMPLETE for t in held.get(plan_key(p), []))
            or (plan_key(p) in held and all(t.state.is_finished() for t in held[plan_key(p)]))
            for p in self.fast_plans)

    def helped(self, trials: Sequence[FrozenTrial]) -> list[str]:
        """The knobs (space order) with a fast trial that is feasible and faster than the baseline by
        more than the margin; for a knob whose parents had to change, also faster by the margin than
        the trial with those parents changed and the knob at its default (when one completed), so a
        child is not credited with its parent's gain. Latencies are of each config's first complete
        trial; without a complete baseline nothing helped."""
        held = self.holders(trials)

        def latency(config: Config) -> float | None:
            done = [t for t in held.get(plan_key(config), []) if t.state == TrialState.COMPLETE]
            return min(done, key=lambda t: t.number).values[0] if done else None

        base = latency(self.fast_plans[0])
        if base is None:
            return []
        out: list[str] = []
        by_name = {p.name: p for p in self.knobs}
        for knob, config in self.fast[1:]:
            assert knob is not None
            ref = latency(active_config(self.knobs, activation(by_name[knob], self.knobs)))
            limit = min(base, ref if ref is not None else base) * (1.0 - self.margin)
            done = [t for t in held.get(plan_key(config), []) if is_feasible(t)]
            if knob not in out and any(t.values[0] < limit for t in done):
                out.append(knob)
        return out

    def plan_list(self, study: Study, trials: Sequence[FrozenTrial], force: bool = False) -> tuple[list[Config], bool]:
        """Fast plans; with the second phase appended (final) once fast is done (or when forced)."""
        if not (force or self.fast_done(trials)):
            return self.fast_plans, False
        helped = tuple(self.helped(trials))
        if helped not in self._second:
            fast_keys = {plan_key(p) for p in self.fast_plans}
            self._second[helped] = [p for p in plans_full(self.params, helped) if plan_key(p) not in fast_keys]
        return self.fast_plans + self._second[helped], True

    def _wait_for_plans(self, study: Study, trials: list[FrozenTrial]) -> list[Config] | None:
        """While fast trials run and no fast plan is free, wait (poll_s, up to wait_s) for them;
        None when the only unfinished fast trials are queued (a retry): this trial is pruned, so
        that the next ask runs the queued one."""
        deadline = self._clock() + self.wait_s
        while True:
            plans, final = self.plan_list(study, trials)
            held = self.holders(trials)
            if final or any(plan_key(p) not in held for p in plans):
                return plans
            pending = [t for p in self.fast_plans for t in held[plan_key(p)] if not t.state.is_finished()]
            if pending and all(t.state == TrialState.WAITING for t in pending):
                return None
            if self._clock() >= deadline:
                _logger.warning("MixedSampler: fast trials still running after wait_s; second phase from those finished.")
                return self.plan_list(study, trials, force=True)[0]
            self._sleep(self.poll_s)
            trials[:] = self._trials(study)


STRATEGIES: dict[str, type[PlanSampler]] = {"fast": FastSampler, "full": FullSampler, "mixed": MixedSampler}


def make_plan_sampler(name: str, params: Sequence[Param], **kwargs: Any) -> PlanSampler:
    """FastSampler, FullSampler or MixedSampler by strategy name ('fast', 'full', 'mixed')."""
    return STRATEGIES[name](params, **kwargs)
