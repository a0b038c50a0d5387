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
