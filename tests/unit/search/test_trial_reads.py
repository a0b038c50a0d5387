"""Reading trials (search.trials) and a route's learnt failure (search.failures), on frozen trials made here:
feasibility at the bound, what ranks trials by speed, which trials are a runtime's defaults or a first look, the
best feasible, and the key a failure is stored under."""
import hashlib
import json

from optuna.trial import TrialState, create_trial

from tuner.search.failures import PREFIX, failure_key, known_failure
from tuner.search.record import BASELINE, ENQUEUED
from tuner.search.trials import (
    FLOAT32_DEFAULTS,
    best_feasible,
    completed,
    is_feasible,
    is_first_look,
    is_runtime_defaults,
    speed_key,
)


def _trial(attrs=None, constraints=None, state=TrialState.COMPLETE, number=0):
    t = create_trial(state=state, values=[1.0, 0.0] if state == TrialState.COMPLETE else None,
                     user_attrs=attrs or {}, system_attrs={f"constraints:{k}": v for k, v in (constraints or {}).items()})
    t.number = number
    return t


def test_feasible_is_complete_with_every_bound_at_or_below_its_limit():
    assert is_feasible(_trial(constraints={"cos<=0.01": 0.0, "rel_l2<=0.1": -0.5}))  # at the limit holds
    assert not is_feasible(_trial(constraints={"cos<=0.01": 0.0, "rel_l2<=0.1": 1e-9}))
    assert not is_feasible(_trial(constraints={"cos<=0.01": -1.0}, state=TrialState.FAIL))


def test_speed_ranks_by_the_paired_ratio_where_there_is_one_else_by_milliseconds():
    paired = _trial({"relative": {"ratio": 0.5}, "latency": {"median_ms": 80.0}})
    alone = _trial({"latency": {"median_ms": 3.0}})
    assert (speed_key(paired), speed_key(alone)) == (0.5, 3.0)
    assert speed_key(_trial()) == float("inf")  # nothing measured ranks last


def test_best_feasible_is_the_fastest_trusted_feasible_completed_trial():
    ok = {"cos<=0.01": -0.001}
    trials = [_trial({"relative": {"ratio": 0.8}}, ok, number=0),
              _trial({"relative": {"ratio": 0.5}}, ok, number=1),
              _trial({"relative": {"ratio": 0.3}}, {"cos<=0.01": 0.2}, number=2),  # faster, infeasible
              _trial({"relative": {"ratio": 0.2, "stopped": "hopeless"}}, ok, number=3),  # a bound, not a ratio
              _trial({"relative": {"ratio": 0.1}}, ok, TrialState.FAIL, number=4)]
    assert best_feasible(trials).number == 1
    assert best_feasible(trials[2:]) is None
    assert [t.number for t in completed(trials)] == [0, 1, 2, 3]


def test_a_runtime_s_defaults_and_the_first_look():
    assert is_runtime_defaults(_trial({BASELINE: True}))
    assert is_runtime_defaults(_trial({ENQUEUED: "openvino defaults"}))
    assert not is_runtime_defaults(_trial({ENQUEUED: "greedy"})) and not is_runtime_defaults(_trial())
    assert not is_runtime_defaults(_trial({ENQUEUED: "openvino" + FLOAT32_DEFAULTS}))
    assert is_first_look(_trial({ENQUEUED: "openvino" + FLOAT32_DEFAULTS})) and is_first_look(_trial({BASELINE: True}))
    assert not is_first_look(_trial({ENQUEUED: "greedy"}))


def test_a_failure_is_stored_under_its_choice_s_hash_whatever_the_key_order():
    choice = {"backend": "openvino", "precision": "int8"}
    key = hashlib.sha256(json.dumps(choice, sort_keys=True).encode()).hexdigest()[:16]
    assert failure_key(choice) == key == failure_key(dict(reversed(list(choice.items()))))
    seen = {"trial": 3, "reason": "it did not build"}
    assert known_failure({PREFIX + key: seen}, choice) == seen
    assert known_failure({PREFIX + key: seen}, choice | {"precision": "fp16"}) is None
