"""time_blocks and measure_paired on fake engines that advance a fake clock: exact arithmetic, no timing."""

import pytest
from clocks import FakeClock

from tuner.measure.latency import LatencyProtocol, measure_latency
from tuner.measure.paired import (
    HOPELESS_ROUNDS,
    LEAD_IN_S,
    MIN_ROUNDS,
    OVERRUN,
    measure_paired,
    ratio_interval,
    run_block,
    time_blocks,
)


def test_steady_engines_converge_after_the_minimum_rounds_with_their_exact_ratio():
    clock = FakeClock()
    samples, converged, stopped = time_blocks([clock.engine(0.002), clock.engine(0.004)], LatencyProtocol(warmup=2),
                                     baseline=1, clock=clock)
    assert converged and stopped is None and len(samples[0]) == len(samples[1]) == MIN_ROUNDS
    assert all(len(block) == 20 for block in samples[0])  # 0.1 s blocks of the slower engine, at most 20 runs
    assert samples[0][0][0] == pytest.approx(2.0) and samples[1][0][0] == pytest.approx(4.0)
    ratio, lo, hi = ratio_interval(samples[0], samples[1])
    assert (ratio, lo, hi) == pytest.approx((0.5, 0.5, 0.5))


def test_an_engine_against_itself_reads_exactly_one():
    clock = FakeClock()
    call = clock.engine(0.003)
    _, _, rel = measure_paired(call, call, LatencyProtocol(warmup=1), clock=clock)
    assert (rel.ratio, rel.ci_low, rel.ci_high, rel.converged) == (pytest.approx(1.0), pytest.approx(1.0),
                                                                   pytest.approx(1.0), True)


def test_slow_engines_stop_at_the_time_cap_after_three_rounds():
    clock = FakeClock()
    # 1 s per run: 3 runs a block (the minimum), a round of two engines = 2 x (1 lead-in + 3) runs = 8 s
    samples, converged, stopped = time_blocks([clock.engine(1.0), clock.engine(1.0)], LatencyProtocol(warmup=1, max_seconds=10),
                                     baseline=1, clock=clock)
    assert not converged and len(samples[0]) == 3 and [len(b) for b in samples[0]] == [3, 3, 3]


def test_the_run_cap_ends_a_timing_that_never_converges():
    clock = FakeClock()
    noisy = clock.engine(0.001, 0.009, 0.002, 0.007)  # spread far wider than +-2%
    samples, converged, stopped = time_blocks([noisy, clock.engine(0.004)], LatencyProtocol(warmup=4, max_runs=60,
                                                                                      max_seconds=1e9),
                                     baseline=1, clock=clock)
    assert not converged and sum(len(b) for b in samples[0]) == 60  # 3 rounds of 20 runs


def test_load_that_slows_one_block_in_six_moves_the_ratio_of_medians_little():
    clock = FakeClock()
    # the baseline's every 7th run reads 3x slow (another process took the core): the median ignores it
    samples, _, _ = time_blocks([clock.engine(0.002), clock.engine(*([0.004] * 6 + [0.012]))],
                             LatencyProtocol(warmup=2), baseline=1, max_rounds=8, clock=clock)
    ratio, _, _ = ratio_interval(samples[0], samples[1])
    assert ratio == pytest.approx(0.5)


def test_measure_latency_converges_on_a_steady_engine_and_caps_a_slow_one():
    clock = FakeClock()
    steady = measure_latency(clock.engine(0.005), LatencyProtocol(warmup=1, min_runs=10), clock=clock)
    assert steady.converged and steady.count == 10 and steady.median_ms == pytest.approx(5.0)
    clock = FakeClock()
    slow = measure_latency(clock.engine(4.0), LatencyProtocol(warmup=1, max_seconds=10), clock=clock)
    assert slow.converged is False and slow.count == 3  # 12 s > 10 s after the third run


def test_a_candidate_known_slower_than_the_limit_stops_after_the_hopeless_rounds():
    clock = FakeClock()
    _, _, rel = measure_paired(clock.engine(0.008), clock.engine(0.004), LatencyProtocol(warmup=1), clock=clock,
                               give_up_above=1.5)
    assert rel.stopped == "hopeless" and rel.rounds == HOPELESS_ROUNDS and rel.ci_low == pytest.approx(2.0)
    assert rel.converged is False
    clock = FakeClock()  # below the limit: timed to convergence as usual
    _, _, rel = measure_paired(clock.engine(0.005), clock.engine(0.004), LatencyProtocol(warmup=1), clock=clock,
                               give_up_above=1.5)
    assert rel.stopped is None and rel.converged is True and rel.ratio == pytest.approx(1.25)


def test_one_run_far_slower_than_the_limit_ends_the_timing_at_once():
    clock = FakeClock()
    slow_runs = []

    def slow():  # 100x the baseline (an f16 hint a CPU emulates): 1 s a run
        slow_runs.append(1)
        clock.t += 0.4

    cand, base, rel = measure_paired(slow, clock.engine(0.004), LatencyProtocol(warmup=5), clock=clock,
                                     give_up_above=1.5)
    assert rel.stopped == "slow run" and len(slow_runs) == 2  # its first warm run, after the baseline's warm-up
    assert rel.converged is False
    assert rel.ratio == pytest.approx(100.0) and cand.median_ms == pytest.approx(400.0)
    assert clock.t == pytest.approx(5 * 0.004 + 2 * 0.4)


def test_a_slow_first_run_alone_does_not_stop_the_timing():
    clock = FakeClock()
    cand, _, rel = measure_paired(clock.engine(0.4, 0.004, 0.004, 0.004, 0.004), clock.engine(0.004),
                                  LatencyProtocol(warmup=5), clock=clock, give_up_above=1.5)
    assert rel.stopped is None and rel.converged and cand.median_ms == pytest.approx(4.0)


def test_no_timing_outlives_the_overrun_cap():
    clock = FakeClock()
    # 0.5 s a run, never tight (alternating), cap 2 s: stops at OVERRUN x 2 s before the third round ends
    samples, converged, stopped = time_blocks([clock.engine(0.3, 0.7), clock.engine(0.5)],
                                              LatencyProtocol(warmup=1, max_seconds=2.0), baseline=1, clock=clock)
    assert stopped == "overrun" and not converged
    assert clock.t <= OVERRUN * 2.0 + 4 * 0.7  # one block past the cap at most


@pytest.mark.parametrize("cap", [0.5 + 0.25 * i for i in range(12)])
def test_an_overrun_mid_round_keeps_whole_rounds_only(cap):
    """The overrun cap can fall between a round's two blocks: the block without its partner is dropped, so
    every engine has the same rounds and the ratio pairs them (it failed with an IndexError under load)."""
    clock = FakeClock()
    engines = [clock.engine(0.3, 0.7), clock.engine(0.5)]
    samples, _, stopped = time_blocks(engines, LatencyProtocol(warmup=1, max_seconds=cap), baseline=1, clock=clock)
    assert len(samples[0]) == len(samples[1]) >= 1
    _, _, rel = measure_paired(*engines, LatencyProtocol(warmup=1, max_seconds=cap), clock=clock)
    assert rel.rounds >= 1


class Recorder:
    """A fake engine that advances the clock by `seconds` a run and records when each of its blocks began."""

    def __init__(self, clock: FakeClock, name: str, seconds: float, log: list):
        self.clock, self.name, self.seconds, self.log, self.runs = clock, name, seconds, log, 0

    def warm_run(self) -> float:
        self.clock.t += self.seconds
        return self.seconds

    def block(self, runs: int) -> list[float]:
        self.log.append(self.name)
        return run_block(self, runs, self.clock)

    def __call__(self) -> None:
        self.runs += 1
        self.clock.t += self.seconds


def test_the_order_of_the_engines_turns_every_round():
    clock, log = FakeClock(), []
    engines = [Recorder(clock, name, 0.002, log) for name in "ABC"]
    time_blocks(engines, LatencyProtocol(warmup=1), baseline=0, max_rounds=4, clock=clock)
    assert log == list("ABC" "CBA" "ABC" "CBA")  # none always runs first, nor always right after another


def test_each_block_starts_with_an_untimed_lead_in_of_at_least_its_length():
    clock, log = FakeClock(), []
    fast = Recorder(clock, "fast", 0.001, log)  # 1 ms runs: LEAD_IN_S holds 20 of them
    samples = run_block(fast, 5, clock)
    assert len(samples) == 5 and fast.runs - 5 == round(LEAD_IN_S / 0.001) == 20  # the lead-in: 20 ms of runs
    slow = Recorder(clock, "slow", 1.0, log)  # a run longer than the lead-in: one untimed run all the same
    run_block(slow, 3, clock)
    assert slow.runs == 3 + 1
