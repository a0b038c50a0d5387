"""When a timing counts as converged (tuner.measure.latency): the median's CI alone is not enough, the
runs themselves must agree."""
import numpy as np
import pytest

from tuner.measure.latency import LatencyProtocol, is_converged, summarize


def test_a_timing_whose_runs_differ_5x_is_not_converged():
    # 19 ms and 96 ms runs around a tight middle: the median's CI is narrow, the runs are not.
    samples = [19.0] * 20 + list(np.linspace(49.9, 50.1, 60)) + [96.0] * 20
    stats = summarize(samples, converged=True)
    assert stats.p10_ms == pytest.approx(19.0) and stats.p90_ms == pytest.approx(96.0)
    assert stats.ci_high_ms - stats.ci_low_ms < 0.1
    assert not stats.converged
    assert not is_converged(samples, LatencyProtocol())
    steady = list(np.linspace(49.0, 51.0, 100))
    assert summarize(steady, converged=True).converged and is_converged(steady, LatencyProtocol())


@pytest.mark.parametrize("spread, steady", [(1.9, True), (2.0, True), (2.05, False), (2.5, False), (3.5, False)])
def test_runs_steady_up_to_twice_apart_at_p90_over_p10(spread, steady):
    """MAX_SPREAD is 2: runs whose p90 is up to 2x their p10 are one engine's; 2.05x apart are not."""
    samples = [10.0] * 10 + [10.0 * spread] * 10 + list(np.linspace(10.0, 10.0 * spread, 80))
    stats = summarize(samples, converged=True)
    assert stats.p90_ms / stats.p10_ms == pytest.approx(spread, rel=0.05)
    assert stats.converged is (stats.p90_ms <= 2.0 * stats.p10_ms) is steady
