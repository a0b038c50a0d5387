"""A trial's record (user attributes and constraints) written in one transaction.

Optuna writes each user attribute in a transaction of its own (two statements: find the trial, upsert the
row), and each constraint in two calls (a read of the trial's system attributes, then the write): a trial's
record (latency, metrics, load, config, the requirement's bounds, ...) took some 20 of them, about 27 ms a trial
on SQLite, most of the tuner's own cost per trial (bench/soak_bench.py). Here, on SQLite and PostgreSQL, one
transaction finds the trial once and upserts all its rows in one statement per table, as Optuna 5.1's RDBStorage
upserts one (`_set_trial_attr_without_commit`: the same tables, the same JSON, the same unique key); the
constraints go under Optuna's own key (`constraints:NAME`, what Trial.set_constraint writes). Another database
gets RDBStorage's per-attribute write in the one transaction; any other storage, Optuna's calls.
"""
from __future__ import annotations

import json
import math
from typing import Any

import optuna
from optuna.storages._rdb import models
from optuna.storages._rdb.storage import _create_scoped_session
from optuna.study._constrained_optimization import _CONSTRAINTS_KEY
from sqlalchemy.dialects import postgresql, sqlite

from ..errors import GATE

UPSERTS = {"sqlite": sqlite.insert, "postgresql": postgresql.insert}  # the dialects with INSERT ... ON CONFLICT


def write_trial(trial: optuna.Trial, attrs: dict[str, Any], constraints: dict[str, float] | None = None) -> None:
    """trial.set_user_attr for each of attrs and trial.set_constraint for each of constraints, in one
    transaction where the storage is a database; a stop (Ctrl-C, SIGTERM) waits for the write's end."""
    with GATE.deferred():
        _write_trial(trial, attrs, constraints)


def _write_trial(trial: optuna.Trial, attrs: dict[str, Any], constraints: dict[str, float] | None) -> None:
    constraints = {bound: float(value) for bound, value in (constraints or {}).items()}
    for bound, value in constraints.items():
        if math.isnan(value):
            raise ValueError(f"constraint {bound!r} is NaN")
    storage = trial.storage
    backend = getattr(storage, "_backend", storage)  # optuna wraps an RDBStorage in a _CachedStorage
    write = getattr(backend, "_set_trial_attr_without_commit", None)
    if not isinstance(backend, optuna.storages.RDBStorage) or write is None or len(attrs) + len(constraints) < 2:
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        for bound, value in constraints.items():
            trial.set_constraint(bound, value)
        return
    system = {f"{_CONSTRAINTS_KEY}:{bound}": value for bound, value in constraints.items()}
    with _create_scoped_session(backend.scoped_session, True) as session:
        insert = UPSERTS.get(backend.engine.name)
        if insert is None:
            for key, value in attrs.items():
                write(session, models.TrialUserAttributeModel, trial._trial_id, key, value)
            for key, value in system.items():
                write(session, models.TrialSystemAttributeModel, trial._trial_id, key, value)
        else:
            found = models.TrialModel.find_or_raise_by_id(trial._trial_id, session)
            backend.check_trial_is_updatable(trial._trial_id, found.state)
            for model, values in ((models.TrialUserAttributeModel, attrs), (models.TrialSystemAttributeModel, system)):
                if values:
                    stmt = insert(model).values([{"trial_id": trial._trial_id, "key": key, "value_json": json.dumps(value)}
                                                 for key, value in values.items()])
                    session.execute(stmt.on_conflict_do_update(index_elements=[model.trial_id, model.key],
                                                               set_={"value_json": stmt.excluded.value_json}))
    # what trial.set_user_attr and set_constraint keep in step
    trial._cached_frozen_trial.user_attrs.update(attrs)
    trial._cached_frozen_trial.system_attrs.update(system)
