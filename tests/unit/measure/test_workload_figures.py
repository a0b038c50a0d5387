"""A workload's figures from its sets' (tuner.measure.workload): weighted means, exactly."""
import pytest

from tuner.measure.latency import LatencyStats
from tuner.measure.paired import RelativeLatency
from tuner.measure.workload import weighted_relative, weighted_stats


def _stats(ms: float, count: int = 10, converged: bool = True) -> LatencyStats:
    return LatencyStats(ms, ms - 1, ms + 1, ms, 0.5, count, ms - 0.5, ms + 0.5, converged)


def test_the_ratio_is_the_weighted_mean_of_the_sets_ratios():
    rels = [RelativeLatency(0.5, 0.4, 0.6, 8, True), RelativeLatency(2.0, 1.5, 2.5, 6, True)]
    got = weighted_relative(rels, [0.75, 0.25])
    assert (got.ratio, got.ci_low, got.ci_high) == pytest.approx((0.875, 0.675, 1.075))
    assert got.rounds == 6 and got.converged and got.stopped is None
    # weights are shares of their sum
    assert weighted_relative(rels, [3, 1]).ratio == pytest.approx(0.875)


def test_converged_only_where_every_set_converged_and_stopped_as_the_first_that_stopped():
    rels = [RelativeLatency(1.0, 0.9, 1.1, 8, True), RelativeLatency(3.0, 2.8, 3.2, 3, False, "hopeless"),
            RelativeLatency(1.0, 0.9, 1.1, 4, False, "overrun")]
    got = weighted_relative(rels, [1, 1, 1])
    assert not got.converged and got.stopped == "hopeless" and got.rounds == 3


def test_one_set_is_its_own_figure():
    rel = RelativeLatency(0.8, 0.7, 0.9, 8, True)
    assert weighted_relative([rel], [1.0]) is rel
    stats = _stats(3.0)
    assert weighted_stats([stats], [1.0]) is stats


def test_latency_is_a_requests_mean_over_the_workload():
    got = weighted_stats([_stats(2.0, 10), _stats(20.0, 4, converged=False)], [0.7, 0.3])
    assert (got.median_ms, got.p10_ms, got.p90_ms, got.mean_ms, got.std_ms, got.ci_low_ms, got.ci_high_ms) == \
        pytest.approx((7.4, 6.4, 8.4, 7.4, 0.5, 6.9, 7.9))
    assert got.count == 14 and got.converged is False
    assert weighted_stats([_stats(2.0), _stats(3.0)], [1, 1]).converged is True
