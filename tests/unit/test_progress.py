"""The trial lines' elapsed time and ETA (tuner/progress.py), on a clock the test sets."""
from clocks import FakeClock

from tuner.progress import TrialProgress


def test_the_eta_is_the_mean_trial_time_times_the_trials_left():
    clock = FakeClock()
    progress = TrialProgress(10, None, live=False, quiet=True, clock=clock)
    clock.t = 40.0
    progress.done = 4  # 10 s a trial, 6 left
    assert progress._eta() == "1m00s"


def test_with_a_timeout_and_no_count_the_eta_is_the_time_left():
    clock = FakeClock()
    progress = TrialProgress(None, 300.0, live=False, quiet=True, clock=clock)
    clock.t = 120.0
    assert progress._eta() == "3m00s"
