"""A timed call that reports its own time (a GPU engine's CUDA events) is recorded as reported; one that
reports nothing is timed by the wall clock."""
import pytest
from clocks import FakeClock

from tuner.measure.latency import LatencyProtocol, measure_latency
from tuner.measure.paired import time_blocks

PROTOCOL = LatencyProtocol(warmup=1, min_runs=3, max_runs=5, max_seconds=5)


def test_a_call_that_reports_its_own_time_is_recorded_as_such():
    times = iter([9.0, 1.0, 2.0, 3.0, 2.0, 2.0, 2.0])  # the first is the warm-up
    stats = measure_latency(lambda: next(times), PROTOCOL)
    # 1 2 3 2 2: never tight within +-2% in five runs, so all five (max_runs) are taken
    assert stats.median_ms == 2.0 and stats.count == 5 and not stats.converged
    clock = FakeClock()

    def reports_a_list():  # takes 3 ms on the clock and returns something that is not a time
        clock.t += 0.003
        return [0.25]

    def reports_its_time():  # takes 1 ms on the clock, says 0.25 ms
        clock.t += 0.001
        return 0.25

    samples, _, _ = time_blocks([reports_its_time, reports_a_list], PROTOCOL, baseline=1, max_rounds=3, clock=clock)
    assert all(x == 0.25 for r in samples[0] for x in r)  # reported, in side-by-side blocks too
    assert all(x == pytest.approx(3.0) for r in samples[1] for x in r)  # a list is no time: the clock's
