"""A trial's stored record read back (defaults for what an older version did not store, the copy a reused build
gets) and which failures say something about the route or the config (what the study learns from them)."""
import pytest
from optuna.trial import create_trial

from tuner.errors import FailureKind, JobPhase, TrialFailure
from tuner.search.failures import is_deterministic, is_timing_timeout
from tuner.search.record import TrialRecord

LATENCY = {"median_ms": 2.0}


def test_a_trial_that_stored_only_its_latency_and_metrics_reads_with_the_defaults():
    old = create_trial(values=[2.0, 0.0], user_attrs={"latency": LATENCY, "metrics": {"cos": 0.0}})
    rec = TrialRecord.from_trial(old)
    assert (rec.config, rec.per_output, rec.violations, rec.feasible, rec.build_s, rec.engine_bytes, rec.backend) == (
        {}, {}, {}, False, 0.0, 0, "")
    assert type(rec.build_s) is float and rec.engine_dir is None and rec.timing_window is None


@pytest.mark.parametrize("attrs", [{"latency": LATENCY}, {"metrics": {"cos": 0.0}}, {}],
                         ids=["no-metrics", "no-latency", "nothing"])
def test_a_trial_that_measured_nothing_has_no_record(attrs):
    assert TrialRecord.from_trial(create_trial(values=[1.0, 1.0], user_attrs=attrs)) is None


def test_a_copied_record_keeps_the_measurement_but_not_the_engine_or_the_timing_window():
    rec = TrialRecord({"precision": "fp32"}, LATENCY, {"cos": 0.0}, {}, {}, True, 1.5, 10, "onnxruntime-1.32.0",
                      engine_dir="/e/7", timing_window=[1.0, 2.0], timing="paired", relative={"ratio": 0.5})
    copy = rec.copied()
    assert copy.engine_dir is None and copy.timing_window is None
    assert copy.latency == LATENCY and copy.relative == {"ratio": 0.5} and copy.build_s == 1.5


def test_the_stored_attrs_leave_out_the_config_and_what_is_unset():
    rec = TrialRecord({"precision": "fp32"}, LATENCY, {"cos": 0.0}, {}, {}, True, 1.5, 10, "ort", timing="alone")
    attrs = rec.to_attrs()
    assert "config" not in attrs and "engine_dir" not in attrs and "relative" not in attrs
    assert attrs["timing"] == "alone" and attrs["feasible"] is True and attrs["engine_bytes"] == 10


@pytest.mark.parametrize("phase", ["calibration", "building", "accuracy check", "saving", ""])
def test_an_error_while_building_or_checking_is_learnt_for_the_route(phase):
    assert is_deterministic(TrialFailure("bad", "error", phase))


@pytest.mark.parametrize("phase", ["start-up", "loading the model and reference", "waiting for the timing lock", "timing"])
def test_an_error_in_a_phase_that_says_nothing_of_the_route_is_not_learnt(phase):
    assert not is_deterministic(TrialFailure("bad", "error", phase))


@pytest.mark.parametrize("failure", [TrialFailure("slow", "timeout", "calibration"), TrialFailure("died", "crash", "building"),
                                     ValueError("not a trial's failure")], ids=["timeout", "crash", "other"])
def test_a_timeout_a_crash_or_another_exception_is_not_learnt_for_the_route(failure):
    assert not is_deterministic(failure)


def test_only_a_timeout_while_timing_is_learnt_for_the_config():
    assert is_timing_timeout(TrialFailure("slow", "timeout", "timing"))
    for failure in (TrialFailure("slow", "timeout", "building"), TrialFailure("bad", "error", "timing"),
                    TrialFailure("died", "crash", "timing"), ValueError("other")):
        assert not is_timing_timeout(failure), failure


def test_a_phase_is_named_by_its_words_and_whatever_follows_them():
    assert JobPhase.of("waiting for the timing lock, held by PID 7, a trial of study s") == JobPhase.WAITING_FOR_LOCK
    assert JobPhase.of("timing side by side") == JobPhase.TIMING and JobPhase.of("timing") == JobPhase.TIMING
    assert JobPhase.of("calibration") is None and JobPhase.of("timings") is None  # a backend's own words
    assert f"during {JobPhase.TIMING}" == "during timing" and str(FailureKind.CRASH) == "crash"


def test_an_error_while_waiting_for_the_lock_held_by_another_is_not_learnt_for_the_route():
    assert not is_deterministic(TrialFailure("lock file gone", "error", "waiting for the timing lock, held by PID 7"))
    assert is_timing_timeout(TrialFailure("slow", "timeout", "timing side by side"))


def test_a_failure_of_no_known_kind_is_refused():
    with pytest.raises(ValueError):
        TrialFailure("odd", "exploded", "building")
