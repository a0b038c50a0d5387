"""A trial's user attributes written in one transaction.

Optuna writes each user attribute in a transaction of its own: a trial's record (latency, metrics, load,
config, ...) took some 19 of them, about 27 ms a trial on SQLite, most of the tuner's own cost per trial
(bench/soak_bench.py). On an RDB storage the attributes go in one transaction through RDBStorage's own
per-attribute write (`_set_trial_attr_without_commit`, Optuna 5.1); any other storage gets Optuna's calls.
"""
from __future__ import annotations

from typing import Any

import optuna
from optuna.storages._rdb import models
from optuna.storages._rdb.storage import _create_scoped_session


def set_user_attrs(trial: optuna.Trial, attrs: dict[str, Any]) -> None:
    """trial.set_user_attr for each item, in one transaction where the storage is a database."""
    storage = trial.storage
    backend = getattr(storage, "_backend", storage)  # optuna wraps an RDBStorage in a _CachedStorage
    write = getattr(backend, "_set_trial_attr_without_commit", None)
    if not isinstance(backend, optuna.storages.RDBStorage) or write is None or len(attrs) < 2:
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        return
    with _create_scoped_session(backend.scoped_session, True) as session:
        for key, value in attrs.items():
            write(session, models.TrialUserAttributeModel, trial._trial_id, key, value)
    trial._cached_frozen_trial.user_attrs.update(attrs)  # what trial.set_user_attr keeps in step
