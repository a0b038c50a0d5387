"""What the objective takes from the study before a trial is timed (the baseline band, the give-up ratio)
and how it scores a disturbed window: exact, on trials made in an in-memory Optuna study."""
from types import SimpleNamespace

import optuna
import pytest
from optuna.distributions import FloatDistribution

from tuner.measure.guard import BaselineBand, guard_record
from tuner.search.objective import GIVE_UP, Objective, baseline_band, give_up_ratio
from tuner.search.record import TrialRecord
from tuner.search.trials import best_feasible

MACHINE = {"cpu": "test", "cores": 2}


def _trial(ratio: float, base_ms: float, feasible: bool = True, guard: dict | None = None, **attrs):
    user = {"relative": {"ratio": ratio}, "baseline_latency": {"median_ms": base_ms}, "latency": {"median_ms": ratio * 100},
            "machine": MACHINE} | ({"baseline_guard": guard} if guard else {}) | attrs
    return optuna.trial.create_trial(params={"x": ratio}, distributions={"x": FloatDistribution(0, 10)}, values=[ratio],
                                     user_attrs=user, constraints={"cos<=0.01": -1.0 if feasible else 1.0})


def _study(*trials):
    study = optuna.create_study()
    for t in trials:
        study.add_trial(t)
    return study


def test_the_band_comes_from_undisturbed_windows_on_this_machine():
    far = {"disturbed": True}
    trials = _study(_trial(1.0, 100.0), _trial(0.8, 110.0), _trial(0.9, 90.0), _trial(0.5, 380.0, guard=far),
                    _trial(0.7, 999.0, machine={"cpu": "other"}), _trial(0.6, 500.0, reused_from=1)).trials
    band = baseline_band(trials, MACHINE)
    assert band.windows == 3 and band.median_ms == 100.0
    assert baseline_band(trials[:2], MACHINE) is None  # two windows say nothing about the noise
    # a slow run's baseline is one run outside the timing lock, not a window: it says nothing of the band
    slow = _trial(4.0, 10.0, relative={"ratio": 4.0, "stopped": "slow run"})
    assert baseline_band(trials + _study(slow).trials, MACHINE).windows == 3
    # a copy of trial 0's measurement (the baseline's own build sampled again) is no window of its own either
    copy_of_0 = _trial(1.0, 100.0, reused_from=0)
    assert baseline_band(trials + _study(copy_of_0).trials, MACHINE).windows == 3


def test_give_up_is_past_the_best_trusted_feasible_ratio():
    trials = _study(_trial(1.0, 100.0), _trial(0.6, 100.0), _trial(0.3, 100.0, feasible=False),
                    _trial(0.2, 100.0, guard={"disturbed": True}),
                    _trial(0.4, 100.0, relative={"ratio": 0.4, "stopped": "hopeless"})).trials
    assert give_up_ratio(trials) == pytest.approx(GIVE_UP * 0.6)
    assert give_up_ratio([]) is None


def test_a_disturbed_trial_is_never_the_best_so_far():
    study = _study(_trial(1.0, 100.0), _trial(0.6, 100.0), _trial(0.2, 300.0, guard={"disturbed": True}))
    assert best_feasible(study).number == 1


def test_a_disturbed_window_is_scored_against_the_band_not_the_window():
    band = BaselineBand.from_history([124.0, 124.0, 124.0])
    # the trial 14: a one-thread candidate at 52.5 ms beside a two-thread baseline that read 382 ms
    rec = TrialRecord(config={}, latency={"median_ms": 52.5}, metrics={"cos": 0.0}, per_output={}, violations={},
                      feasible=True, build_s=0.0, engine_bytes=0, backend="x", relative={"ratio": 52.5 / 382},
                      baseline_latency={"median_ms": 382.0}, baseline_guard=guard_record(band, 382.0, 0))
    requirement = SimpleNamespace(primary_metric="cos")
    ctx = SimpleNamespace(problem=SimpleNamespace(requirement=requirement), objectives=("latency",))
    objective = Objective.__new__(Objective)
    objective.ctx = ctx
    study = optuna.create_study()
    trial = study.ask()
    assert objective._report(trial, rec) == pytest.approx(52.5 / 124.0)  # 2.4x, not 7.3x
    undisturbed = TrialRecord(**{**rec.to_dict(), "baseline_guard": guard_record(band, 130.0, 0),
                                 "relative": {"ratio": 0.4}})
    assert objective._report(study.ask(), undisturbed) == pytest.approx(0.4)
