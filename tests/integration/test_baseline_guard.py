"""The baseline guards every timing (tuner/measure/guard.py): a paired window whose baseline falls outside
the study's band is timed again (--when-busy wait) or marked, and never scored from that window. Real
engines of the demo model; the band is set by the test so that the outcome does not depend on load."""
import pytest

from tuner.execute.timing import RETIMES, RETIMES_WARN, measure
from tuner.measure.guard import BaselineBand
from tuner.measure.latency import LatencyProtocol
from tuner.problem.spec import config_from_sets, load_problem

FAST = LatencyProtocol(warmup=1, min_runs=3, max_runs=12, max_seconds=0.5)
ONE_THREAD = ["intra_op_num_threads=1"]


@pytest.fixture(scope="module")
def problem(demo_path):
    return load_problem(demo_path, shapes=["x=2x64x256"], n_batches=1)


def _far_band(ms: float) -> BaselineBand:
    """A band no window of this machine can fall in: a tenth of what the baseline reads."""
    return BaselineBand.from_history([ms / 10] * 3)


def test_a_window_outside_the_band_is_marked_and_timed_again_under_wait(problem, tmp_path):
    base = config_from_sets(problem, [])
    cand = config_from_sets(problem, ONE_THREAD)
    quiet = measure(problem, cand, str(tmp_path / "q"), FAST, baseline=base)
    band = _far_band(quiet.baseline_latency["median_ms"])
    warned = measure(problem, cand, str(tmp_path / "w"), FAST, baseline=base, band=band, when_busy="warn")
    assert warned.disturbed and warned.baseline_guard["retimed"] == RETIMES_WARN  # once more at once, no wait
    assert warned.baseline_guard["window_ms"] == warned.baseline_latency["median_ms"]
    phases, waits = [], []
    # the wait for a quiet machine is the test's (the real one waits up to 30 min where a burner runs)
    waited = measure(problem, cand, str(tmp_path / "x"), FAST, baseline=base, band=band, when_busy="wait",
                     on_phase=phases.append, wait_quiet=waits.append)
    assert waited.disturbed and waited.baseline_guard["retimed"] == RETIMES
    assert sum("timing again" in p for p in phases) == RETIMES and len(waits) == 1 + RETIMES  # before, and per retime


@pytest.mark.timing
def test_a_window_inside_the_band_is_timed_once(problem, tmp_path):
    """Real timings on the real clock. Tolerates windows of one baseline moving 30% between fresh processes
    (a band from 0.5x to 2x the first reading is 4 spreads wide); a 2x slow window is a disturbed machine."""
    base = config_from_sets(problem, [])
    cand = config_from_sets(problem, ONE_THREAD)
    q = measure(problem, cand, str(tmp_path / "q"), FAST, baseline=base).baseline_latency["median_ms"]
    fair = measure(problem, cand, str(tmp_path / "f"), FAST, baseline=base, when_busy="wait",
                   band=BaselineBand.from_history([q / 2, q, 2 * q]), wait_quiet=lambda on_phase: None)
    assert not fair.disturbed and fair.baseline_guard["retimed"] == 0
