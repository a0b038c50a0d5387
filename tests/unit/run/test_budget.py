"""The trial budget of one run (tuner/run/local_workers.py), on a clock the test sets."""
from clocks import FakeClock

from tuner.run.local_workers import Budget


def test_a_trial_count_is_taken_exactly():
    budget = Budget(3, None)
    assert [budget.take() for _ in range(5)] == [True, True, True, False, False]


def test_the_deadline_ends_the_budget_at_its_second():
    clock = FakeClock(1000.0)
    budget = Budget(None, 60.0, clock=clock)
    assert budget.take() and not budget.stopped()
    clock.t += 59.9
    assert budget.take()
    clock.t += 0.1
    assert budget.stopped() and not budget.take()


def test_a_stop_ends_it_whatever_is_left():
    budget = Budget(10, 3600.0, clock=FakeClock(1000.0))
    budget.stop()
    assert budget.stopped() and not budget.take()
