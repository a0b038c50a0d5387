"""Why a trial has no measurement (tuner.search.trials.fail_reason), as the trial line (tuner.report.progress) and
`tuner trials` (tuner.report.trials_table) both say it."""
import optuna
from optuna.trial import TrialState, create_trial

from tuner.report.progress import trial_state
from tuner.report.trials_table import REASON_CHARS, table_lines, trial_rows
from tuner.search.trials import fail_reason

FAILED = create_trial(state=TrialState.FAIL, user_attrs={"fail_reason": "RuntimeError:\n  bad   shape " + "x" * 80})
KNOWN = create_trial(state=TrialState.PRUNED, user_attrs={"known_failure": {"trial": 3, "reason": "no int8 kernel"}})


def test_a_failure_is_said_on_one_line_and_a_known_one_names_its_trial_and_reason():
    assert fail_reason(FAILED) == "RuntimeError: bad shape " + "x" * 80
    assert fail_reason(KNOWN) == "route failed in trial 3: no int8 kernel"
    assert fail_reason(create_trial(value=1.0, user_attrs={"fail_reason": "stale"})) == ""  # completed: none
    assert fail_reason(create_trial(state=TrialState.FAIL)) == ""  # nothing stored


def test_the_trial_line_and_the_trials_table_say_the_same_reason():
    assert trial_state(KNOWN, None) == "pruned: route failed in trial 3: no int8 kernel"
    assert trial_state(FAILED, None) == "fail: " + fail_reason(FAILED)[:70]  # the log file has the rest
    assert trial_state(FAILED, None, full=True) == "fail: " + fail_reason(FAILED)
    assert trial_state(create_trial(state=TrialState.FAIL), None) == "fail"
    study = optuna.create_study()
    for t in (FAILED, KNOWN):
        study.add_trial(t)
    view, rows = trial_rows(study)
    assert [r["fail_reason"] for r in rows] == [fail_reason(FAILED), fail_reason(KNOWN)]
    lines = table_lines(view, rows)
    cut = fail_reason(FAILED)[: REASON_CHARS - 3] + "..."
    assert lines[1].endswith(f"  {cut}") and lines[2].endswith("  route failed in trial 3: no int8 kernel")
