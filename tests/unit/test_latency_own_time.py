"""A timed call that reports its own time (a GPU engine's CUDA events) is recorded as reported; one that
reports nothing is timed by the wall clock."""
from tuner.measure.latency import LatencyProtocol, measure_latency, time_side_by_side

PROTOCOL = LatencyProtocol(warmup=1, min_runs=3, max_runs=5, max_seconds=5)


def test_a_call_that_reports_its_own_time_is_recorded_as_such():
    times = iter([9.0, 1.0, 2.0, 3.0, 2.0, 2.0, 2.0])  # the first is the warm-up
    stats = measure_latency(lambda: next(times), PROTOCOL)
    assert stats.median_ms == 2.0 and stats.count >= 3
    samples = time_side_by_side([lambda: 0.25, lambda: [0.25]], rounds=3, per_round=2, warmup=1)
    assert samples[0] == [0.25] * 6  # reported
    assert all(s != 0.25 for s in samples[1])  # a list is no time: the wall clock's
