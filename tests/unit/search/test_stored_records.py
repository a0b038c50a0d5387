"""What the study and its trials store, read back typed (search.record: StoredTrial, StoredStudy, Winner): the one
reader of those attributes, so every view reads a missing attribute, a copy or a selection alike."""
import os
import re

from optuna.trial import TrialState, create_trial

from tuner.search.record import (
    BEST_EFFORT_ATTR,
    MAX_TRIALS_ATTR,
    PROTOCOL_ATTR,
    SETTINGS_ATTR,
    WINNER_ATTR,
    StoredStudy,
    StoredTrial,
)

TUNER = os.path.join(os.path.dirname(__file__), "..", "..", "..", "tuner")


def _trial(attrs):
    return create_trial(state=TrialState.COMPLETE, values=[1.0], user_attrs=attrs)


def test_a_trial_without_attributes_reads_as_unmeasured_with_empty_config_and_metrics():
    rec = StoredTrial.of(_trial({}))
    assert (rec.config, rec.metrics, rec.machine, rec.has_config, rec.measured) == ({}, {}, {}, False, False)
    assert rec.median_ms == float("inf") and rec.ratio is None and rec.stopped is None and rec.lock_wait_s == 0.0
    assert not (rec.baseline or rec.copied or rec.disturbed or rec.busy) and rec.baseline_pid is None


def test_a_trial_reads_its_measurement_and_its_marks():
    rec = StoredTrial.of(_trial({
        "config": {"precision": "int8"}, "latency": {"median_ms": 2.5}, "relative": {"ratio": 0.8, "stopped": "overrun"},
        "baseline_guard": {"disturbed": True}, "load": {"busy": True, "other_cores": 1.2},
        "processes": {"candidate": 11, "baseline": 12}, "baseline": True, "lock_wait_s": 3, "worker": "host:7"}))
    assert rec.has_config and rec.config == {"precision": "int8"} and rec.measured and rec.median_ms == 2.5
    assert (rec.ratio, rec.stopped, rec.disturbed, rec.busy, rec.baseline_pid) == (0.8, "overrun", True, True, 12)
    assert rec.baseline and rec.lock_wait_s == 3.0 and rec.worker == "host:7"


def test_a_copy_of_trial_0_is_a_copy():
    # reused_from 0 is falsy: a truthiness test took a copy of the baseline's build for a timing of its own
    assert StoredTrial.of(_trial({"reused_from": 0})).copied and not StoredTrial.of(_trial({})).copied


def test_the_study_says_whether_selection_ran_and_what_it_found():
    assert not StoredStudy.of({}).selected and StoredStudy.of({}).winner is None
    none = StoredStudy.of({WINNER_ATTR: None, BEST_EFFORT_ATTR: {"trial": 3}})
    assert none.selected and none.winner is None and none.best_effort == {"trial": 3}
    won = StoredStudy.of({WINNER_ATTR: {"trial": 5, "speedup": 1.4, "latency": {"median_ms": 2.0}, "load": {"busy": True}},
                          SETTINGS_ATTR: {"seed": 1}, MAX_TRIALS_ATTR: None, PROTOCOL_ATTR: {"max_seconds": 1.0},
                          "greedy_enqueued/t": True})
    w = won.winner
    assert (w.trial, w.speedup, w.busy, w.config, w.finalists) == (5, 1.4, True, {}, [])
    assert w.confirmed_latency == {"median_ms": 2.0}  # a winner stored before the side-by-side confirmation
    assert won.settings == {"seed": 1} and won.has_budget and won.max_trials is None and won.has_protocol
    assert won.marked("greedy_enqueued/t") and not won.marked("greedy_enqueued/u")


def test_only_the_record_module_reads_stored_attributes():
    """Every read of a trial's or the study's attributes goes through search.record (which takes them once, whole);
    store.artifacts reads its own (a layer below the search)."""
    readers = []
    for dirpath, _, files in os.walk(TUNER):
        for f in files:
            path = os.path.join(dirpath, f)
            if f.endswith(".py") and re.search(r"user_attrs\.get|user_attrs\[", open(path).read()):
                readers.append(os.path.relpath(path, TUNER))
    assert readers == [os.path.join("store", "artifacts.py")]
