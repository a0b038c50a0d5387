"""Routes that fail to build, learnt once: a build that raised for a route and its options is recorded
in the study; later trials with the same choice are not built again but pruned as infeasible, which
steers Optuna's samplers away from them (TPE ranks infeasible trials last)."""
from __future__ import annotations

import hashlib
import json

import optuna

from ..errors import FailureKind, JobPhase, TrialFailure

PREFIX = "route_failure/"
KNOWN_FAILURE = "known_failure"  # trial attr: the failure a pruned trial was not built for
BUILD_CONSTRAINT = "builds"  # the constraint a known failure violates, besides every requirement bound
# Phases where a failure says nothing about the route (the problem, the lock, the timing itself).
_NOT_THE_ROUTE = (JobPhase.START_UP, JobPhase.LOADING, JobPhase.WAITING_FOR_LOCK, JobPhase.TIMING)


def failure_key(choice: dict) -> str:
    return hashlib.sha256(json.dumps(choice, sort_keys=True, default=str).encode()).hexdigest()[:16]


def is_deterministic(failure: Exception) -> bool:
    """A child's exception while building or checking the engine (not a timeout, not a crash, not another
    exception of the parent's)."""
    return (isinstance(failure, TrialFailure) and failure.kind == FailureKind.ERROR
            and JobPhase.of(failure.phase) not in _NOT_THE_ROUTE)


def is_timing_timeout(failure: Exception) -> bool:
    """The trial's time ran out while its engine was being timed: this config is too slow to time, learnt
    for the whole config (not its route: the same route with other settings may be fast)."""
    return (isinstance(failure, TrialFailure) and failure.kind == FailureKind.TIMEOUT
            and JobPhase.of(failure.phase) == JobPhase.TIMING)


def known_failure(study_attrs: dict, choice: dict) -> dict | None:
    """The failure recorded for this choice, from the study's user attributes (read once by the caller)."""
    return study_attrs.get(PREFIX + failure_key(choice))


def record_failure(study: optuna.Study, choice: dict, trial_number: int, reason: str) -> None:
    key = PREFIX + failure_key(choice)
    if key not in study.user_attrs:
        study.set_user_attr(key, {"trial": trial_number, "reason": reason, "choice": choice})


def learnt_failures(study_attrs: dict) -> list[dict]:
    return [v for k, v in study_attrs.items() if k.startswith(PREFIX)]
