"""The arithmetic under paired timing, exactly: the bootstrap interval of a ratio, when an interval is tight,
the order statistics of a median's interval, the statistics of a timing, and the clock read relative to the
timing's start (a fake clock that does not start at zero). Mutation testing found these unwatched
(docs/mutation.md)."""
import math

import pytest
from clocks import FakeClock

from tuner.measure.latency import LatencyProtocol, is_converged, median_ci, steady, summarize
from tuner.measure.paired import MIN_ROUNDS, _tight, measure_paired, ratio_interval, time_blocks

SPREAD = [[float(x)] for x in range(1, 12)]  # one sample a round, 1..11 ms: median 6
FLAT = [[1.0]] * 11


def test_the_interval_of_a_ratio_comes_from_resampling_both_engines_rounds():
    ratio, lo, hi = ratio_interval(SPREAD, FLAT)  # all of the spread is the candidate's
    assert ratio == 6.0 and lo <= 4.0 and hi >= 8.0
    ratio, lo, hi = ratio_interval(FLAT, SPREAD)  # all of it the baseline's
    assert ratio == pytest.approx(1 / 6) and lo <= 1 / 8 and hi >= 1 / 4


def test_an_interval_is_tight_only_where_both_sides_are_within_the_relative_bound():
    # powers of two: the bounds are exact, so "within" includes the bound itself
    assert _tight(0.5, 0.375, 0.625, 0.25)
    assert not _tight(0.5, 0.375, 0.75, 0.25) and not _tight(0.5, 0.25, 0.625, 0.25)  # one side too wide is enough
    # the bound is relative to the ratio: +-2% of 2.0 is +-0.04
    assert _tight(2.0, 1.97, 2.03, 0.02)
    assert not _tight(2.0, 1.95, 2.01, 0.02) and not _tight(2.0, 1.99, 2.05, 0.02)


def test_the_median_s_interval_is_the_order_statistics_n_over_2_plus_minus_0_98_sqrt_n():
    samples = [float(x) for x in range(100)]
    assert median_ci(samples) == (40.0, 60.0)  # 50 -+ 9.8, floored and ceiled
    assert median_ci([1.0, 2.0, 3.0]) == (1.0, 3.0)  # clipped to the samples at both ends


def test_a_timing_s_statistics():
    stats = summarize([float(x) for x in range(101)], converged=True)
    assert (stats.median_ms, stats.p10_ms, stats.p90_ms, stats.mean_ms, stats.count) == (50.0, 10.0, 90.0, 50.0, 101)
    assert stats.std_ms == pytest.approx(math.sqrt(850.0))
    assert stats.converged is False  # p90 is 9x p10: not steady, whatever the caller says
    assert summarize([4.0, 4.0, 5.0], converged=True).converged is True


def test_runs_of_zero_or_sub_millisecond_length():
    assert not steady(0.0, 0.0)  # no time measured is no steady timing
    assert steady(0.5, 0.6)
    assert is_converged([0.5] * 10, LatencyProtocol(min_runs=10))  # a fast engine converges like any other


def test_a_clock_that_does_not_start_at_zero_times_the_same():
    clock = FakeClock(start=1000.0)  # perf_counter's zero is arbitrary
    samples, converged, stopped = time_blocks([clock.engine(0.002), clock.engine(0.004)], LatencyProtocol(warmup=2),
                                              baseline=1, clock=clock)
    assert converged and stopped is None and len(samples[0]) == MIN_ROUNDS


def test_measure_paired_keeps_to_the_protocol_it_is_given():
    clock = FakeClock()
    noisy = clock.engine(0.001, 0.009, 0.002, 0.007)
    cand, _, rel = measure_paired(noisy, clock.engine(0.004), LatencyProtocol(warmup=4, max_runs=60, max_seconds=1e9),
                                  clock=clock)
    assert rel.rounds == 3 and cand.count == 60 and rel.converged is False and cand.converged is False


def test_a_run_over_the_limit_after_quick_warm_runs_stops_at_that_run():
    clock = FakeClock()
    cand, _, rel = measure_paired(clock.engine(0.004, 0.004, 0.4), clock.engine(0.004), LatencyProtocol(warmup=5),
                                  clock=clock, give_up_above=1.5)
    assert rel.stopped == "slow run" and rel.converged is False and cand.median_ms == pytest.approx(400.0)


def test_a_run_3x_the_baseline_is_not_a_slow_run_at_a_limit_of_1_5():
    # the slow-run stop is SLOW_RUN x give_up_above x the baseline's run: 4.5x here; 3x is timed until hopeless
    clock = FakeClock()
    _, _, rel = measure_paired(clock.engine(0.012), clock.engine(0.004), LatencyProtocol(warmup=3), clock=clock,
                               give_up_above=1.5)
    assert rel.stopped == "hopeless" and rel.ratio == pytest.approx(3.0)
