"""The report's summary rows (tuner.report.view.summary_rows) on a study made in memory."""
from memory_studies import stats, two_objective_study, winner

from tuner.report import summary_rows


def test_the_report_says_the_notes_and_the_finalists():
    finalists = [{"trial": 1, "baseline": False, "feasible": True} | stats(3.0, 0.2),
                 {"trial": 0, "baseline": True, "feasible": True} | stats(3.1, 0.2)]
    note = "no --require: every trial counts as feasible"
    rows = dict(summary_rows(two_objective_study([(3.1, 0.0, True), (3.0, 1e-3, False)], winner=winner(finalists, 1),
                                                 notes=[note])))
    assert rows["note"] == note
    assert rows["finalist trial 1"].startswith("3.000 ms, p10-p90") and "(winner)" in rows["finalist trial 1"]
    assert "ties trial 0 (the baseline) within noise" in rows["tie within noise"]
