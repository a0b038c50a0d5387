"""Throughput studies (--throughput N, issue 42 item 5) on the demo model with real engines: each timed run puts
N requests in flight through the runtime's own parallelism, the setting is stored and holds on resume, OpenVINO's
performance hint joins the space, and the winner is compared with the defaults side by side in the same mode."""
import os

import numpy as np
import optuna
import pytest
from needs import backend_or_skip
from test_tune_a_study import options

from tuner.backends.base import load_for_timing
from tuner.cli.main import main
from tuner.errors import UserError
from tuner.execute.evaluate import build_checked
from tuner.inputs.space import SPACES_DIR
from tuner.problem.spec import config_from_sets, load_problem
from tuner.run.tune import tune_study
from tuner.search.settings import SETTINGS_ATTR

SHAPES = ["x=1x64x256"]


@pytest.fixture(scope="module")
def problem(demo_path):
    return load_problem(demo_path, shapes=SHAPES, n_batches=1)


def _saved(problem, tmp_path, backend):
    built = build_checked(problem, config_from_sets(problem, [f"backend={backend}"]), str(tmp_path / backend),
                          check=False)
    return load_for_timing(built.backend, built.engine_dir)


def test_an_openvino_call_runs_every_request_in_flight_on_the_batch(problem, tmp_path):
    backend_or_skip("openvino")
    engine = _saved(problem, tmp_path, "openvino")
    try:
        expected = engine.run(problem.batches[0])["y"]
        call = engine.concurrent_call(problem.batches[0], 3)
        call()
        # each of the three requests ran on the staged batch: its output is the engine's output
        port = engine._outputs[0]  # the port of the first output, "y"
        outs = [np.array(engine._queue[i].get_output_tensor(port).data) for i in range(3)]
        assert all(np.allclose(o, expected, atol=1e-5) for o in outs) and len(engine._queue) == 3
    finally:
        engine.close()


def test_an_onnxruntime_call_runs_the_session_once_per_request_in_flight(problem, tmp_path):
    engine = _saved(problem, tmp_path, "onnxruntime")
    runs = []
    real = engine.session.run
    engine.session.run = lambda *a, **k: runs.append(1) or real(*a, **k)  # the real session, counted
    try:
        call = engine.concurrent_call(problem.batches[0], 4)
        call()
        assert len(runs) == 4
        call()
        assert len(runs) == 8
        assert engine.timed_call(problem.batches[0])() is not None and len(runs) == 9  # latency: one request
    finally:
        engine.close()


def test_the_space_gains_openvinos_performance_hint_only_for_throughput(demo_path):
    backend_or_skip("openvino")
    path = os.path.join(SPACES_DIR, "cpu.yaml")
    assert load_problem(demo_path, space_path=path, shapes=SHAPES).space.param("performance_hint") is None
    tp = load_problem(demo_path, space_path=path, shapes=SHAPES, in_flight=2)
    hint = tp.space.param("performance_hint")
    assert (hint.choices, hint.default, hint.when) == (["auto", "THROUGHPUT"], "auto", {"backend": ["openvino"]})
    assert tp.spec.in_flight == 2 and "each engine is timed with 2 requests in flight at once" in tp.notes[-1]
    assert load_problem(demo_path, space_path=path, shapes=SHAPES, in_flight=1).spec.in_flight is None
    with pytest.raises(UserError, match="--throughput 0: give the number of requests in flight"):
        load_problem(demo_path, shapes=SHAPES, in_flight=0)


def test_a_throughput_study_times_in_flight_and_holds_its_setting(demo_path, tmp_path, capsys):
    result = tune_study(options(tmp_path, demo_path, shapes=SHAPES, in_flight=2, n_trials=3))
    study = result.study
    assert study.user_attrs[SETTINGS_ATTR]["in_flight"] == 2
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == 3 and all(t.user_attrs.get("relative") for t in done[1:])
    winner = result.winner
    assert winner is not None and winner["baseline_trial"] == 0 and winner["speedup"] > 0  # side by side, in flight
    assert main(["status", "--study", "s", "--storage", f"sqlite:///{tmp_path}/s.db"]) == 0
    assert "timing paired, throughput with 2 requests in flight" in capsys.readouterr().out
    with pytest.raises(UserError, match="was created with in_flight=2, not 3"):
        tune_study(options(tmp_path, demo_path, shapes=SHAPES, in_flight=3, n_trials=1))
    resumed = tune_study(options(tmp_path, None, shapes=SHAPES, n_trials=1, select=False))  # no flag: stored holds
    assert resumed.study.user_attrs[SETTINGS_ATTR]["in_flight"] == 2
