"""A timed call that reports its own time (a GPU engine's CUDA events) is recorded as reported; one that
reports nothing is timed by the wall clock."""
from tuner.measure.latency import LatencyProtocol, measure_latency
from tuner.measure.paired import time_blocks

PROTOCOL = LatencyProtocol(warmup=1, min_runs=3, max_runs=5, max_seconds=5)


def test_a_call_that_reports_its_own_time_is_recorded_as_such():
    times = iter([9.0, 1.0, 2.0, 3.0, 2.0, 2.0, 2.0])  # the first is the warm-up
    stats = measure_latency(lambda: next(times), PROTOCOL)
    # 1 2 3 2 2: never tight within +-2% in five runs, so all five (max_runs) are taken
    assert stats.median_ms == 2.0 and stats.count == 5 and not stats.converged
    samples, _, _ = time_blocks([lambda: 0.25, lambda: [0.25]], PROTOCOL, baseline=1, max_rounds=3)
    assert all(x == 0.25 for r in samples[0] for x in r)  # reported, in side-by-side blocks too
    assert all(x != 0.25 for r in samples[1] for x in r)  # a list is no time: the wall clock's
