"""Reading a study's trials: feasibility, latency, the baseline, the best feasible and the closest one."""
from __future__ import annotations

import optuna
from optuna.trial import TrialState

from ..record import BASELINE


def is_feasible(t) -> bool:
    return t.state == TrialState.COMPLETE and all(v <= 0 for v in t.constraints.values())


def latency_of(t) -> float:
    return float(t.user_attrs.get("latency", {}).get("median_ms", float("inf")))


def completed(study: optuna.Study) -> list:
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def baseline_trial(study: optuna.Study):
    return next((t for t in completed(study) if t.user_attrs.get(BASELINE)), None)


def best_feasible(study: optuna.Study):
    feas = [t for t in completed(study) if is_feasible(t)]
    return min(feas, key=latency_of) if feas else None


def closest_candidate(study: optuna.Study):
    """The best effort when nothing is feasible: least total constraint violation, then latency."""
    done = completed(study)
    if not done:
        return None
    return min(done, key=lambda t: (sum(max(0.0, v) for v in t.constraints.values()), latency_of(t)))
