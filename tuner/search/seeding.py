"""Exact resume: Optuna's samplers, seeded per trial, so that a study stopped and resumed (Ctrl-C, SIGTERM,
SIGKILL, a reboot) proposes the configs a study run straight through proposes, given the same results.

Optuna's samplers draw from random states that advance with every call and live only in the process; a
resumed process started them again from the seed, so it proposed other configs than an uninterrupted run
did. Here, before each trial, every random state of the sampler is seeded again from the study's seed and
the trial's slot: what the sampler proposes then depends on the stored trials, the seed and the slot only.
The rest of what these samplers keep lives in the study's storage (TPE's constant-liar params, NSGA-II's
generations and parent populations) or is dropped before each trial (the GP sampler's warm start of its
kernel fit).

A trial's slot is its number less the trials before it that a stop or a death ended ("lost" trials): the
trial after a lost one takes its slot, and, the lost trial being invisible to the samplers (they read
complete and pruned trials; the grid sampler reads failed ones too and is made to skip lost ones:
GridSampler), proposes its config again; a config that a killed process left running comes back as an
enqueued retry (tuner.run.tune.recover_stale_trials) and takes its slot the same way. Parallel workers need
no seed of their own: their trials have distinct numbers, hence distinct slots.
"""
from __future__ import annotations

import copy
import secrets
import zlib

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from ..store.optuna_private import LazyRandomState, storage_of, stored_trials, study_id, trial_id
from .record import StoredTrial
from .trials import trials_of_this_trial

# The end of the fail reason of a trial that a stop (Ctrl-C, SIGTERM: search.objective.Objective) or the
# death of its process (SIGKILL, a reboot: run.tune.recover_stale_trials) ended, not its config.
LOST = "during this trial"
SEED_RANGE = 2**32  # numpy's RandomState takes seeds in [0, 2**32)


def new_seed() -> int:
    """A study's seed where the user gave none: drawn once, at its creation, and stored in its settings."""
    return secrets.randbelow(2**31)


def is_lost(trial: FrozenTrial) -> bool:
    """A trial that a stop or a death ended, before its config had a result (by its fail reason)."""
    return trial.state == TrialState.FAIL and str(StoredTrial.of(trial).fail_reason or "").endswith(LOST)


def retry_of(trial: FrozenTrial) -> int | None:
    """The number of the trial this one retries: the tuner's retry of a config a killed process left running,
    or Optuna's (a database server's heartbeat failed the trial of a dead worker, with no reason stored)."""
    number = StoredTrial.of(trial).retry_of
    # what RetryHeartbeatStaleTrialCallback.retried_trial_number reads (experimental: a warning per call)
    return number if number is not None else trial.system_attrs.get("failed_trial")


def lost_numbers(trials: list[FrozenTrial]) -> set[int]:
    """The numbers of the lost trials among these (a retried failure counts as lost)."""
    retried = {retry_of(t) for t in trials}
    return {t.number for t in trials if t.state == TrialState.FAIL and (is_lost(t) or t.number in retried)}


def trial_slot(study: optuna.Study, trial: FrozenTrial) -> int:
    """The trial's number less the lost trials before it: the index a run straight through gives it."""
    return trial.number - sum(1 for n in lost_numbers(trials_of_this_trial(study)) if n < trial.number)


def carry_from_retried(study: optuna.Study, trial: FrozenTrial, keys: tuple[str, ...]) -> None:
    """A retry of a config that a killed process left running (enqueued: the sampler samples nothing for it)
    takes these system attrs of the trial it retries, as that trial would have them in a run straight through."""
    retried, missing = retry_of(trial), [k for k in keys if k not in trial.system_attrs]
    if retried is None or not missing:
        return
    storage = storage_of(study)
    original = storage.get_trial(storage.get_trial_id_from_study_id_trial_number(study_id(study), retried))
    for key in missing:
        if key in original.system_attrs:
            storage.set_trial_system_attr(trial_id(trial), key, original.system_attrs[key])


def random_states(sampler: optuna.samplers.BaseSampler) -> dict[str, LazyRandomState]:
    """Every random state of the sampler (its own, its fallback sampler's, its strategies'), by attribute
    path, each once (NSGA-II's child generation strategy shares the sampler's)."""
    found: dict[str, LazyRandomState] = {}
    seen: set[int] = set()

    def walk(obj, path: str, depth: int) -> None:
        if id(obj) in seen or depth > 4:
            return
        seen.add(id(obj))
        if isinstance(obj, LazyRandomState):
            found[path] = obj
            return
        if isinstance(obj, dict):
            items = obj.items()
        elif isinstance(obj, (list, tuple)):
            items = enumerate(obj)
        elif depth == 0 or type(obj).__module__.startswith("optuna."):
            items = getattr(obj, "__dict__", {}).items()
        else:
            return
        for key, value in list(items):
            walk(value, f"{path}.{key}" if path else str(key), depth + 1)

    walk(sampler, "", 0)
    return found


def reseed(sampler: optuna.samplers.BaseSampler, seed: int, slot: int) -> None:
    """Seed each random state of the sampler from (seed, slot, its path): the same trial slot draws the
    same numbers in any process, and no two states of one trial draw the same."""
    for path, state in random_states(sampler).items():
        entropy = np.random.SeedSequence([seed % SEED_RANGE, slot, zlib.crc32(path.encode())])
        state.rng.seed(entropy.generate_state(4))


class PerTrialSeed:
    """Mixin for an Optuna sampler: before each trial, its random states seeded from (seed, the trial's slot)."""

    def __init__(self, *args, seed: int, **kwargs):
        super().__init__(*args, seed=seed % SEED_RANGE, **kwargs)
        self.study_seed = seed % SEED_RANGE

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        slot = trial_slot(study, trial)
        reseed(self, self.study_seed, slot)
        super().before_trial(study, self.seen_at_slot(study, trial, slot))

    def seen_at_slot(self, study: optuna.Study, trial: FrozenTrial, slot: int) -> FrozenTrial:
        """The trial as the Optuna sampler's before_trial is to see it: as it is (the grid sampler's differs)."""
        return trial


# Optuna's names, kept: the study records the class name (samplers.sampler_options), and NSGA-II names the
# generation it stores in each trial after its class ("NSGAIISampler:generation"): a resumed older study
# keeps its generations.
class TPESampler(PerTrialSeed, optuna.samplers.TPESampler):
    pass


class RandomSampler(PerTrialSeed, optuna.samplers.RandomSampler):
    pass


class GridSampler(PerTrialSeed, optuna.samplers.GridSampler):
    """The grid's order (its shuffle by the seed) is the same in every process, workers included: a grid
    point's id in the storage means the same point to all of them.

    Optuna's gives trial n the grid point n (while n is below the grid's size; then an unvisited point at
    random) and counts the point of every finished trial as visited, a stopped one's included. Here a trial
    takes the point of its slot, and a lost trial's point is not visited: the trial after a stop proposes the
    stopped config again, as with the other samplers, and the order goes on as in a run straight through; a
    retry keeps the point of the trial it retries. (Queueing a stopped trial's config again, as a killed
    one's is, would not do: the grid points by number after it would still be one off.)"""

    def seen_at_slot(self, study: optuna.Study, trial: FrozenTrial, slot: int) -> FrozenTrial:
        carry_from_retried(study, trial, ("grid_id", "search_space"))
        at_slot = copy.copy(trial)  # as Optuna copies a FrozenTrial (Trial._get_latest_trial)
        at_slot.number = slot  # what Optuna's before_trial reads the number for: the grid point in a straight run
        return at_slot

    def _get_unvisited_grid_ids(self, study: optuna.Study) -> list[int]:
        """Optuna 5.1's, the points of lost trials left unvisited (its before_trial, after_trial and
        is_exhausted ask this). Optuna's read of the trials, not the per-trial cache: after_trial asks too."""
        trials = stored_trials(study)
        lost = lost_numbers(trials)
        visited, running = set(), set()
        for t in trials:
            if ("grid_id" in t.system_attrs and t.number not in lost
                    and self._same_search_space(t.system_attrs["search_space"])):
                if t.state.is_finished():
                    visited.add(t.system_attrs["grid_id"])
                elif t.state == TrialState.RUNNING:
                    running.add(t.system_attrs["grid_id"])
        grid = set(range(self._n_min_trials))
        # all points started: those not finished, so that each is evaluated before the study stops
        return sorted(grid - visited - running or grid - visited)


class NSGAIISampler(PerTrialSeed, optuna.samplers.NSGAIISampler):
    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        """A retry of a config that a killed process left running (enqueued: NSGA-II samples nothing for it,
        so would give it no generation) counts in the generation of the trial it retries, as that trial
        would have in a run straight through."""
        super().before_trial(study, trial)
        carry_from_retried(study, trial, (self._get_generation_key(),))


class GPSampler(PerTrialSeed, optuna.samplers.GPSampler):
    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        """Its kernel fit starts from the defaults in every trial, not from the process's previous fit (which
        a resumed process does not have)."""
        self._gprs_cache_list = None
        self._constraints_gprs_cache_list = None
        super().before_trial(study, trial)
