"""The parent's side of timing (tuner.execute.timing) on fake engine processes: the baseline's process kept
across trials and replaced, a window above the band retiring it, the deployment check's order (never two
engine processes alive at once) and its ratio. No engine is built and nothing depends on the machine's speed."""
import itertools

import pytest

from tuner.execute import timing
from tuner.execute.timing import AloneFigure, BaselineProcess, alone_ratio, time_alone, time_trial
from tuner.measure.guard import BaselineBand
from tuner.measure.latency import LatencyProtocol

PIDS = itertools.count(1000)


class FakeProcess:
    """An engine process whose runs take `ms` each (ms_of(pid) where given); alive between start and close."""

    alive: set = set()
    started: list = []

    def __init__(self, backend, folder, batch, label="engine", ms=10.0):
        self.backend, self.folder, self.label, self.ms = backend, folder, label, ms
        self.pid = next(PIDS)
        self.warm_runs = 0
        FakeProcess.alive.add(self.pid)
        FakeProcess.started.append((self.pid, folder))

    def warm_run(self) -> float:
        self.warm_runs += 1
        return self.ms / 1e3

    def block(self, runs: int) -> list[float]:
        return [self.ms] * runs

    def close(self) -> None:
        FakeProcess.alive.discard(self.pid)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@pytest.fixture(autouse=True)
def _fresh():
    FakeProcess.alive, FakeProcess.started = set(), []


def starter(ms_by_folder: dict):
    def start(backend, folder, batch, label="engine"):
        proc = FakeProcess(backend, folder, batch, label, ms_by_folder[folder])
        assert not FakeProcess.alive - {proc.pid} or label != "engine alone", "two engines alive in the deployment check"
        return proc
    return start


def test_the_baseline_process_serves_its_trials_then_a_fresh_one_starts():
    base = BaselineProcess("onnxruntime", "base", {}, trials=3, start=starter({"base": 10.0}))
    pids = [base.get().pid for _ in range(7)]
    assert pids[0] == pids[1] == pids[2] != pids[3] == pids[4] == pids[5] != pids[6]
    assert base.started == 3 and len(FakeProcess.alive) == 1  # the replaced ones were closed
    base.retire()
    assert FakeProcess.alive == set() and base.get().pid not in pids and base.started == 4


def test_a_slow_run_limit_asks_one_warm_run_and_is_no_trial():
    base = BaselineProcess("onnxruntime", "base", {}, trials=2, start=starter({"base": 12.0}))
    limit, base_ms = timing.slow_run_limit(base, 1.5)
    proc = base.get()
    assert (base_ms, limit) == (12.0, timing.SLOW_RUN * 1.5 * 12.0)
    assert proc.warm_runs == 2  # a fresh process: its first run may pay for set-up, so one more
    assert base.get() is proc and base.get() is not proc  # asking counted no trial: two trials on it, then a new one
    assert timing.slow_run_limit(base, None) == (None, None) and timing.slow_run_limit(None, 1.5) == (None, None)


def _band(high_ms: float) -> BaselineBand:
    return BaselineBand(high_ms / 1.25, high_ms / 1.25 * 0.75, high_ms, 5)


def test_a_window_above_the_band_retires_the_baseline_process():
    start = starter({"cand": 8.0, "base": 20.0})
    base = BaselineProcess("onnxruntime", "base", {}, start=start)
    with start("onnxruntime", "cand", {}) as cand:
        first = time_trial(cand, base, "cpu", LatencyProtocol(max_seconds=5.0), band=_band(12.0))
        assert first.relative.ratio == pytest.approx(0.4) and first.processes == {"candidate": cand.pid,
                                                                                  "baseline": first.processes["baseline"]}
        # warn: timed once more at once with a fresh baseline process, still above: both processes retired
        assert first.retimed == timing.RETIMES_WARN and first.processes["baseline"] not in FakeProcess.alive
        second = time_trial(cand, base, "cpu", LatencyProtocol(max_seconds=5.0), band=_band(30.0))
    assert second.processes["baseline"] != first.processes["baseline"] and second.retimed == 0
    baselines = [pid for pid, folder in FakeProcess.started if folder == "base"]
    assert len(baselines) == 1 + timing.RETIMES_WARN + 1  # the window, its retime, then a fresh one for `second`


def test_wait_times_a_disturbed_window_again_with_a_fresh_baseline_process():
    ms = {"cand": 8.0, "base": 20.0}
    start = starter(ms)
    base = BaselineProcess("onnxruntime", "base", {}, start=start)
    waits = []
    with start("onnxruntime", "cand", {}) as cand:
        got = time_trial(cand, base, "cpu", LatencyProtocol(max_seconds=5.0), when_busy="wait", band=_band(12.0),
                         wait_quiet=lambda on_phase: waits.append(1))
    baselines = [pid for pid, folder in FakeProcess.started if folder == "base"]
    assert got.retimed == timing.RETIMES and len(baselines) == timing.RETIMES + 1
    assert got.processes["baseline"] == baselines[-1] and len(waits) == 1 + timing.RETIMES


def test_without_a_baseline_the_candidate_is_timed_alone():
    start = starter({"cand": 8.0})
    with start("onnxruntime", "cand", {}) as cand:
        got = time_trial(cand, None, "cpu", LatencyProtocol(max_seconds=5.0))
    assert got.relative is None and got.baseline is None and got.latency.median_ms == 8.0
    assert got.processes == {"candidate": cand.pid}


def test_the_deployment_check_turns_the_order_and_never_runs_two_engines_at_once():
    saved = [("openvino", "win"), ("onnxruntime", "base")]
    figures = time_alone(saved, {}, "cpu", processes=4, seconds=0.01, start=starter({"win": 9.0, "base": 18.0}))
    assert [folder for _, folder in FakeProcess.started] == ["win", "base", "base", "win", "win", "base", "base", "win"]
    assert FakeProcess.alive == set()
    assert [f.medians_ms for f in figures] == [[9.0] * 4, [18.0] * 4]
    assert len(set(figures[0].pids) | set(figures[1].pids)) == 8  # a fresh process each time


def test_the_alone_ratio_is_of_the_medians_of_the_processes_medians():
    win, base = AloneFigure([10.0, 11.0, 30.0], [1, 2, 3]), AloneFigure([20.0, 22.0, 21.0], [4, 5, 6])
    ratio, lo, hi = alone_ratio(win, base)
    assert ratio == pytest.approx(11.0 / 21.0) and lo <= ratio <= hi
    # every process alike: no spread between processes, an exact interval
    assert alone_ratio(AloneFigure([5.0] * 3, []), AloneFigure([10.0] * 3, [])) == (0.5, 0.5, 0.5)
