"""A trial's record (user attributes and constraints) written in one transaction.

Optuna writes each user attribute in a transaction of its own (two statements: find the trial, upsert the
row), and each constraint in two calls (a read of the trial's system attributes, then the write): a trial's
record (latency, metrics, load, config, the requirement's bounds, ...) took some 20 of them, about 27 ms a trial
on SQLite, most of the tuner's own cost per trial (bench/soak_bench.py). Here, on SQLite and PostgreSQL, one
transaction finds the trial once and upserts all its rows in one statement per table, as Optuna 5.1's RDBStorage
upserts one (store.optuna_private.rdb_attr_writer: the same tables, the same JSON, the same unique key); the
constraints go under Optuna's own key (`constraints:NAME`, what Trial.set_constraint writes). Another database
gets RDBStorage's per-attribute write in the one transaction; any other storage, Optuna's calls.
"""
from __future__ import annotations

import json
import math
from typing import Any

import optuna
from sqlalchemy.dialects import postgresql, sqlite

from ..errors import GATE
from ..store.optuna_private import CONSTRAINTS_KEY, keep_cached_attrs, rdb_attr_writer, rdb_models, rdb_session, trial_id

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
    rdb = rdb_attr_writer(trial.storage)
    if rdb is None or len(attrs) + len(constraints) < 2:
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        for bound, value in constraints.items():
            trial.set_constraint(bound, value)
        return
    backend, write = rdb
    system = {f"{CONSTRAINTS_KEY}:{bound}": value for bound, value in constraints.items()}
    tid = trial_id(trial)
    with rdb_session(backend) as session:
        insert = UPSERTS.get(backend.engine.name)
        if insert is None:
            for key, value in attrs.items():
                write(session, rdb_models.TrialUserAttributeModel, tid, key, value)
            for key, value in system.items():
                write(session, rdb_models.TrialSystemAttributeModel, tid, key, value)
        else:
            found = rdb_models.TrialModel.find_or_raise_by_id(tid, session)
            backend.check_trial_is_updatable(tid, found.state)
            for model, values in ((rdb_models.TrialUserAttributeModel, attrs),
                                  (rdb_models.TrialSystemAttributeModel, system)):
                if values:
                    stmt = insert(model).values([{"trial_id": tid, "key": key, "value_json": json.dumps(value)}
                                                 for key, value in values.items()])
                    session.execute(stmt.on_conflict_do_update(index_elements=[model.trial_id, model.key],
                                                               set_={"value_json": stmt.excluded.value_json}))
    keep_cached_attrs(trial, attrs, system)
