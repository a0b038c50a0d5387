"""The baseline timed in several processes over a study (tuner.search.trials.baseline_modes): processes that
read it alike say nothing; one in a mode of its own (a gap beyond MODE_GAP and beyond every window's noise)
is one line naming both figures."""
from types import SimpleNamespace

from tuner.search.trials import MODE_GAP, baseline_modes


def trial(pid, ms, **extra):
    return SimpleNamespace(user_attrs={"processes": {"candidate": 1, "baseline": pid},
                                       "baseline_latency": {"median_ms": ms}, **extra})


def test_processes_that_agree_say_nothing():
    assert baseline_modes([trial(10, 18.0), trial(10, 18.4), trial(20, 18.2), trial(20, 17.9)]) == ""
    assert baseline_modes([trial(10, 18.0), trial(10, 25.0)]) == ""  # one process: nothing to compare


def test_a_process_in_a_mode_of_its_own_is_named_with_both_figures():
    line = baseline_modes([trial(10, 18.0), trial(10, 18.2), trial(20, 24.5), trial(20, 24.9), trial(30, 17.9)])
    assert line.startswith("the baseline read 17.90 ms in one process and 24.70 ms in another (3 processes timed it)")


def test_a_gap_inside_the_noise_of_the_windows_or_under_the_gap_says_nothing():
    # the slow process's fastest window (18.5) is inside the fast one's windows (up to 19.0)
    assert baseline_modes([trial(10, 17.0), trial(10, 19.0), trial(20, 18.5), trial(20, 30.0), trial(20, 29.0)]) == ""
    # every window apart, but the medians are closer than MODE_GAP
    assert baseline_modes([trial(10, 18.0), trial(20, 18.0 * MODE_GAP * 0.99)]) == ""
    assert baseline_modes([trial(10, 18.0), trial(20, 18.0 * MODE_GAP * 1.01)]) != ""


def test_a_copied_measurement_is_not_a_window():
    assert baseline_modes([trial(10, 18.0), trial(20, 25.0, reused_from=3)]) == ""
