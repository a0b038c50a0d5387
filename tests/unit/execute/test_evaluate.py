"""accuracy_within: the accuracy check that a slow candidate ends early, on a fake engine and a fake clock."""
from types import SimpleNamespace

import numpy as np
import pytest
from clocks import FakeClock

from tuner.execute.evaluate import accuracy_within
from tuner.measure.paired import stopped_at
from tuner.measure.requirement import Requirement
from tuner.problem.spec import ShapeCase

BATCHES = [{"x": np.full((2, 3), i, dtype=np.float32)} for i in range(4)]
REFS = [{"y": np.arange(6, dtype=np.float32).reshape(2, 3) + i} for i in range(4)]


def _problem():
    return SimpleNamespace(cases=[ShapeCase({"x": (2, 3)}, 1.0, BATCHES, REFS)], several_shapes=False,
                           requirement=Requirement.parse("cos<=0.01"), spec=SimpleNamespace(ref_outputs=None))


class SlowEngine:
    """Exact outputs; each run advances the clock by seconds[i] (the last value repeats)."""

    def __init__(self, clock: FakeClock, *seconds: float):
        self.clock, self.seconds, self.runs = clock, seconds, 0

    def run(self, batch):
        self.clock.t += self.seconds[min(self.runs, len(self.seconds) - 1)]
        self.runs += 1
        return {"y": REFS[int(batch["x"][0, 0])]["y"]}


def test_without_a_limit_every_batch_is_checked():
    clock = FakeClock()
    engine = SlowEngine(clock, 60.0)
    got = accuracy_within(_problem(), engine, None, clock)
    metrics, slow = got.metrics, got.slow_ms
    assert slow is None and engine.runs == 4 and metrics["cos"] == pytest.approx(0.0, abs=1e-6)


def test_a_warm_run_over_the_limit_ends_the_check_with_the_batches_so_far():
    clock = FakeClock()
    engine = SlowEngine(clock, 5.0, 2.0)  # a slow first run, then 2 s a run
    got = accuracy_within(_problem(), engine, 1000.0, clock)
    metrics, slow = got.metrics, got.slow_ms
    # the first run is timed once more, warm; 2000 ms is over the 1000 ms limit: one batch's metrics
    assert slow == pytest.approx(2000.0) and engine.runs == 2 and metrics["cos"] == pytest.approx(0.0, abs=1e-6)


def test_a_slow_first_run_alone_does_not_end_the_check():
    clock = FakeClock()
    engine = SlowEngine(clock, 5.0, 0.5)  # lazy set-up on the first run only
    slow = accuracy_within(_problem(), engine, 1000.0, clock).slow_ms
    assert slow is None and engine.runs == 5  # 4 batches and the warm retake of the first


def test_one_slow_run_later_in_the_check_is_taken_again_and_does_not_end_it():
    clock = FakeClock()
    engine = SlowEngine(clock, 0.5, 0.5, 5.0, 0.5)  # the third batch's run lost its core once
    slow = accuracy_within(_problem(), engine, 1000.0, clock).slow_ms
    assert slow is None and engine.runs == 5  # 4 batches and the retake of the third


def test_a_slow_run_reads_as_paired_timing_stopped_with_one_run_each():
    cand, base, rel = stopped_at(900.0, 10.0, "slow run")
    assert (cand.median_ms, base.median_ms, rel.ratio, rel.stopped, rel.converged) == (900.0, 10.0, 90.0, "slow run", False)
