"""An engine alone in a fresh process of its own (tuner.execute.engine_process), with real saved engines:
the process imports its own runtime and no other, answers blocks of runs, and a broken folder or a killed
process fails with its reason and leaves nothing running."""
import os
import signal

import psutil
import pytest
from needs import backend_or_skip

from tuner.errors import TrialFailure
from tuner.execute.engine_process import LOAD_PHASE, EngineProcess
from tuner.execute.evaluate import build_checked
from tuner.problem.spec import config_from_sets, load_problem


@pytest.fixture(scope="module")
def problem(demo_path):
    return load_problem(demo_path, shapes=["x=2x64x256"], n_batches=1)


def _saved(problem, tmp_path, sets):
    built = build_checked(problem, config_from_sets(problem, sets), str(tmp_path / "engine"), check=False)
    return built.backend, built.engine_dir


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_an_engine_process_holds_its_own_runtime_alone(problem, tmp_path, backend):
    backend_or_skip(backend)
    name, folder = _saved(problem, tmp_path, [f"backend={backend}"])
    with EngineProcess(name, folder, problem.batches[0]) as proc:
        assert proc.pid != os.getpid() and psutil.Process(proc.pid).ppid() == os.getpid()
        assert proc.runtimes() == [backend]  # what the parent holds (both, here) is not in it
        assert proc.warm_run() > 0 and len(proc.block(4)) == 4
        pid = proc.pid
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_folder_that_holds_no_engine_fails_while_loading_and_leaves_no_process(problem, tmp_path):
    (tmp_path / "empty").mkdir()
    before = {p.pid for p in psutil.Process().children()}
    with pytest.raises(TrialFailure) as caught:
        EngineProcess("onnxruntime", str(tmp_path / "empty"), problem.batches[0], label="candidate")
    assert caught.value.kind == "error" and caught.value.phase == LOAD_PHASE
    assert str(caught.value).startswith("candidate process: ValueError: ") and "not an onnxruntime engine" in str(caught.value)
    assert {p.pid for p in psutil.Process().children()} == before


def test_a_killed_engine_process_fails_its_timing_as_a_crash(problem, tmp_path):
    name, folder = _saved(problem, tmp_path, ["backend=onnxruntime"])
    proc = EngineProcess(name, folder, problem.batches[0], label="baseline")
    try:
        os.kill(proc.pid, signal.SIGKILL)
        with pytest.raises(TrialFailure) as caught:
            proc.block(3)
    finally:
        proc.close()
    assert caught.value.kind == "crash" and caught.value.phase == "timing"
    assert str(caught.value) == "baseline process killed by signal 9 (SIGKILL) during timing"
