"""Optuna's private parts: the one module of engine-tuner that imports a private Optuna name or reads a private
attribute of Optuna's objects. Each use says why; all were checked against Optuna 5.1.0 (CHECKED_AGAINST, the pin
in pyproject.toml). tests/unit/test_optuna_private.py keeps every other module off them, so when Optuna moves
one, this module is the one to mend.

Hooks that engine-tuner's subclasses override or call on themselves, also checked against 5.1.0 (they stay in
their classes, as overriding is their point):
- `Study._get_trials` (search.reading.CheckedStudy: every read of a study's trials goes through it);
- `GridSampler._get_unvisited_grid_ids`, `NSGAIISampler._get_generation_key` (search.seeding: a retried trial
  takes the grid point or generation of the trial it retries);
- `BaseHeartbeat._get_stale_trial_ids` (store.proxy_client: what Optuna's fail_stale_trials asks a storage).
search.seeding.random_states also walks a sampler's attributes (`__dict__`) for its LazyRandomState objects.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import optuna

# seeding: a sampler's random states, to reseed each per trial (samplers keep them as LazyRandomState)
from optuna.samplers._lazy_random_state import LazyRandomState

# proxy_client: a storage with heartbeats must be a BaseHeartbeat; claims: whether one is on
from optuna.storages._heartbeat import BaseHeartbeat, is_heartbeat_enabled

# write_trial: the tables RDBStorage keeps a trial's attributes in, and its own transaction
from optuna.storages._rdb import models as rdb_models
from optuna.storages._rdb.storage import _create_scoped_session

# write_trial: the system attribute key Trial.set_constraint writes a constraint under
from optuna.study._constrained_optimization import _CONSTRAINTS_KEY
from optuna.trial import FrozenTrial, TrialState

CHECKED_AGAINST = "5.1.0"
CONSTRAINTS_KEY = _CONSTRAINTS_KEY

__all__ = ["CHECKED_AGAINST", "CONSTRAINTS_KEY", "BaseHeartbeat", "LazyRandomState", "is_heartbeat_enabled",
           "rdb_models"]


def storage_of(study: optuna.Study) -> optuna.storages.BaseStorage:
    """The study's storage: a Study has no public accessor, and trials not running here (a dead worker's, a
    retried one's) are read and written through it."""
    return study._storage


def study_id(study: optuna.Study) -> int:
    """The storage's id of the study (the storage's calls take it; a Study shows only its name)."""
    return study._study_id


def trial_id(trial: optuna.Trial | FrozenTrial) -> int:
    """The storage's id of a trial (FrozenTrial and Trial hold it; only the number is public)."""
    return trial._trial_id


def stored_trials(study: optuna.Study) -> list[FrozenTrial]:
    """Every trial as the storage holds it now, read as GridSampler reads them (not the per-trial cache:
    a sampler's after_trial reads too, after the cache was filled)."""
    return storage_of(study).get_all_trials(study_id(study), deepcopy=False)


def cached_trials(study: optuna.Study, states: tuple[TrialState, ...] | None = None) -> list[FrozenTrial]:
    """The trials as read once for the trial running in this thread (`Study._get_trials(use_cache=True)`:
    cleared at each ask and tell), which Optuna's samplers share; a plain read where a study has no such cache."""
    get = getattr(study, "_get_trials", None)
    if get is None:
        return study.get_trials(deepcopy=False, states=states)
    return get(deepcopy=False, states=states, use_cache=True)


def sampler_settings(sampler: optuna.samplers.BaseSampler) -> dict[str, Any]:
    """The options that change a sampler's proposals, as it keeps them (its constructor's arguments have no public
    getters): multivariate, group, n_startup_trials, constant_liar (TPE), population_size (NSGA-II)."""
    return {k.lstrip("_"): getattr(sampler, k)
            for k in ("_multivariate", "_group", "_n_startup_trials", "_constant_liar", "_population_size")
            if hasattr(sampler, k)}


def distribution_contains(distribution: optuna.distributions.BaseDistribution, value: Any) -> bool:
    """Whether a distribution holds a value (`_contains` of its internal repr: what Optuna checks a fixed
    parameter with). ValueError where the value has no internal repr in it."""
    return distribution._contains(distribution.to_internal_repr(value))


def stale_trial_ids(storage: optuna.storages.BaseStorage, study: int) -> list[int]:
    """The RUNNING trials whose heartbeat stopped (what Optuna's fail_stale_trials asks; the proxy serves it)."""
    return storage._get_stale_trial_ids(study)


def inner_storage(storage: optuna.storages.BaseStorage) -> optuna.storages.BaseStorage:
    """The storage under Optuna's cache: get_storage wraps an RDBStorage in a _CachedStorage (`_backend`)."""
    return getattr(storage, "_backend", storage)


def journal_file(storage: optuna.storages.BaseStorage) -> str | None:
    """The file a JournalStorage's file backend writes (it keeps no public path)."""
    return getattr(inner_storage(storage), "_file_path", None)


def rdb_attr_writer(storage: optuna.storages.BaseStorage) -> tuple[optuna.storages.RDBStorage, Any] | None:
    """(the RDBStorage, its per-attribute write inside a session) where the storage is one; else None. The write
    is `_set_trial_attr_without_commit(session, model, trial_id, key, value)`: the upsert RDBStorage does itself."""
    backend = inner_storage(storage)
    write = getattr(backend, "_set_trial_attr_without_commit", None)
    if not isinstance(backend, optuna.storages.RDBStorage) or write is None:
        return None
    return backend, write


@contextlib.contextmanager
def rdb_session(backend: optuna.storages.RDBStorage) -> Iterator[Any]:
    """One transaction of RDBStorage's own kind (its session, committed at the end, rolled back on an error)."""
    with _create_scoped_session(backend.scoped_session, True) as session:
        yield session


def keep_cached_attrs(trial: optuna.Trial, user: dict[str, Any], system: dict[str, Any]) -> None:
    """What Trial.set_user_attr and set_constraint keep in step with the storage: the trial's cached copy."""
    trial._cached_frozen_trial.user_attrs.update(user)
    trial._cached_frozen_trial.system_attrs.update(system)


def rdb_tables() -> set[str]:
    """The tables of Optuna's schema (a file holding other tables is not Optuna's)."""
    return set(rdb_models.BaseModel.metadata.tables)


def grpc_proxy_service():
    """(add_StorageServiceServicer_to_server, OptunaStorageProxyService): what optuna.storages.run_grpc_proxy_server
    serves, for a server of our own. ImportError where Optuna's gRPC parts (optuna>=4.2, grpcio) are missing."""
    from optuna.storages._grpc.auto_generated.api_pb2_grpc import add_StorageServiceServicer_to_server
    from optuna.storages._grpc.servicer import OptunaStorageProxyService

    return add_StorageServiceServicer_to_server, OptunaStorageProxyService
