"""The analysis cache's form of a job's result (tuner.execute.results.QuickCheck): what one study stored, another
reads back the same, and judges under its own requirement."""
import json

from tuner.execute.results import QuickCheck


def test_a_quick_check_reads_back_as_stored_through_json():
    got = QuickCheck({"cos": 0.02}, True, median_ms=3.0, baseline_ms=4.0, ratio=0.75, ratio_ci=(0.7, 0.8))
    stored = json.loads(json.dumps(got.to_json()))
    assert stored["ratio_ci"] == [0.7, 0.8]
    assert QuickCheck.from_json(stored) == got  # the interval a tuple again, every field kept


def test_an_untimed_check_keeps_no_figures_and_is_judged_anew():
    stored = json.loads(json.dumps(QuickCheck({"cos": 0.02}, True).to_json()))
    back = QuickCheck.from_json(stored)
    assert (back.median_ms, back.ratio, back.ratio_ci) == (None, None, None)
    assert back.judged(False) == QuickCheck({"cos": 0.02}, False)
