"""A workload of several sets of shapes (issue 42), on the demo model with real ONNX Runtime and OpenVINO builds:
each set checked and timed, the objective the weighted mean of the sets' ratios, accuracy at every set, no choice that
fixes the engine's shapes, and the per-set figures through select, export, verify, status and the report."""
import json
import os

import numpy as np
import optuna
import pytest
from needs import backend_or_skip
from test_tune_a_study import options

from tuner.cli.main import main
from tuner.errors import TrialFailure, UserError
from tuner.execute.evaluate import build_checked
from tuner.execute.timing import measure_built, problem_shapes
from tuner.inputs.space import SPACES_DIR
from tuner.measure.latency import LatencyProtocol
from tuner.problem.spec import config_from_sets, load_problem
from tuner.run.tune import tune_study
from tuner.search import objective
from tuner.search.record import TrialRecord

WORKLOAD = ["x=1x64x256@0.7", "x=4x64x256@0.3"]
ONE_SET_SHAPES = "x=2x64x256"


def test_a_two_set_study_runs_end_to_end_with_each_sets_figures(demo_path, tmp_path, capsys, monkeypatch):
    # every trial is timed at both sets: none given up on as too slow to win (a give-up leaves no per-set figure,
    # and under CI's burner a candidate's runs could read slow enough)
    monkeypatch.setattr(objective, "GIVE_UP", float("inf"))
    result = tune_study(options(tmp_path, demo_path, shapes=WORKLOAD, n_trials=3))
    study = result.study
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == 3
    for t in done:
        rec = TrialRecord.from_trial(t)
        figures = rec.shape_figures
        assert [(f.shapes, f.weight) for f in figures] == [("x=1x64x256", pytest.approx(0.7)), ("x=4x64x256", pytest.approx(0.3))]
        # the trial's ratio (the objective's latency) is the weighted mean of its sets' paired ratios
        assert rec.relative_latency == pytest.approx(0.7 * figures[0].ratio + 0.3 * figures[1].ratio)
        assert rec.median_ms == pytest.approx(0.7 * figures[0].median_ms + 0.3 * figures[1].median_ms)
        # and its error each metric's worst over the sets
        assert rec.metrics["cos"] == max(f.metrics["cos"] for f in figures)
        assert figures[0].median_ms < figures[1].median_ms  # each set ran its own batch (4x the rows)
    winner = result.winner
    assert [f["shapes"] for f in winner["confirmed_workload"]] == ["x=1x64x256", "x=4x64x256"]
    assert 1 / winner["speedup"] == pytest.approx(sum(f["weight"] * f["ratio"] for f in winner["confirmed_workload"]))

    out = tmp_path / "engine"
    assert main(["export", "--study", "s", "--storage", f"sqlite:///{tmp_path}/s.db", "--out", str(out),
                 "--no-verify"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["workload"] == [{"shapes": "x=1x64x256", "weight": pytest.approx(0.7)},
                                  {"shapes": "x=4x64x256", "weight": pytest.approx(0.3)}]
    assert report["workload_figures"] == winner["confirmed_workload"] and report["serves_only_these_shapes"] is None
    capsys.readouterr()
    assert main(["verify", "--study", "s", "--storage", f"sqlite:///{tmp_path}/s.db", "--engine", str(out)]) == 0
    said = capsys.readouterr().out
    assert "(the weighted mean over the workload's sets of shapes)" in said
    assert "  at x=1x64x256 (70% of requests): " in said and "  at x=4x64x256 (30% of requests): " in said
    assert main(["status", "--study", "s", "--storage", f"sqlite:///{tmp_path}/s.db"]) == 0
    assert "  at x=4x64x256 (30% of requests): " in capsys.readouterr().out
    assert main(["report", "--study", "s", "--storage", f"sqlite:///{tmp_path}/s.db", "--out", str(tmp_path / "r.html")]) == 0
    assert "speedup per set of shapes" in (tmp_path / "r.html").read_text()


def test_a_changed_workload_is_refused_on_resume(demo_path, tmp_path):
    tune_study(options(tmp_path, demo_path, shapes=WORKLOAD, n_trials=1, select=False))
    with pytest.raises(UserError, match=r"was created with shapes=\[.x=1x64x256@0.7., .x=4x64x256@0.3.\], not"):
        tune_study(options(tmp_path, demo_path, shapes=["x=1x64x256@0.5", "x=4x64x256@0.5"], n_trials=1, select=False))


def test_a_trial_accurate_at_one_set_and_not_at_the_other_is_infeasible(demo_path, tmp_path, monkeypatch):
    # an error that is 0 where a batch has one row and 1 where it has four: the requirement holds at the first set only
    (tmp_path / "rows_metric.py").write_text(
        "def rows(outputs, refs, inputs):\n    return float(next(iter(inputs[0].values())).shape[0] > 1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    need = "rows_metric:rows<=0.5"
    problem = load_problem(demo_path, shapes=WORKLOAD, require=need)
    built = build_checked(problem, config_from_sets(problem, []), str(tmp_path / "two"))
    assert [m["rows_metric:rows"] for m in built.per_case] == [0.0, 1.0]
    assert built.metrics["rows_metric:rows"] == 1.0 and not built.feasible
    assert built.violations == {need: 0.5}
    one = load_problem(demo_path, shapes=["x=1x64x256"], require=need)  # the same engine at the first set alone
    assert build_checked(one, config_from_sets(one, []), str(tmp_path / "one")).feasible


@pytest.mark.parametrize("space", ["cpu.yaml", "openvino-cpu.yaml"])
def test_static_shapes_is_offered_only_with_one_set(demo_path, space):
    backend_or_skip("openvino")
    path = os.path.join(SPACES_DIR, space)
    one = load_problem(demo_path, space_path=path, shapes=[ONE_SET_SHAPES])
    assert one.space.param("static_shapes").type == "bool"
    several = load_problem(demo_path, space_path=path, shapes=WORKLOAD)
    offered = several.space.param("static_shapes")
    assert (offered.type, offered.choices, offered.default) == ("categorical", [False], False)
    assert f"{space}: OpenVINO's static_shapes: true is not offered: the engine would serve only one set of the " \
           "workload's shapes" in several.notes
    assert not any("static_shapes" in n for n in one.notes)


def test_data_feeds_each_set_cut_from_its_batches(demo_path, tmp_path):
    rng = np.random.default_rng(0)
    data = tmp_path / "d.npz"
    np.savez(data, x=rng.standard_normal((3, 4, 64, 256)).astype(np.float32))
    problem = load_problem(demo_path, data=str(data), shapes=WORKLOAD)
    assert [c.shapes["x"] for c in problem.cases] == [(1, 64, 256), (4, 64, 256)]
    assert [len(c.batches) for c in problem.cases] == [3, 3]
    full = np.load(data)["x"]
    assert np.array_equal(problem.cases[0].batches[2]["x"], full[2][:1])
    with pytest.raises(UserError, match="none may be larger"):
        load_problem(demo_path, data=str(data), shapes=["x=1x64x256@1", "x=8x64x256@1"])


def test_one_set_hashes_its_data_as_before_and_weights_are_part_of_a_workloads(demo_path):
    from tuner.inputs import data as data_mod
    one = load_problem(demo_path, shapes=[ONE_SET_SHAPES])
    assert one.data_hash == data_mod.batches_hash(one.batches) + data_mod.batches_hash(one.calib)[:8]
    a = load_problem(demo_path, shapes=WORKLOAD)
    b = load_problem(demo_path, shapes=["x=1x64x256@0.6", "x=4x64x256@0.4"])
    assert a.data_hash != b.data_hash and a.data_hash != one.data_hash
    with pytest.raises(UserError, match="--ref-outputs"):
        load_problem(demo_path, data="d.npz", ref_outputs="r.npz", shapes=WORKLOAD)


def test_an_engine_that_cannot_run_one_set_fails_with_that_set_named(demo_path, tmp_path):
    backend_or_skip("openvino")
    problem = load_problem(demo_path, space_path=os.path.join(SPACES_DIR, "openvino-cpu.yaml"), shapes=WORKLOAD)
    # static_shapes is not offered with two sets; built anyway, the engine is reshaped to the first set's shapes
    config = config_from_sets(problem, []) | {"static_shapes": True}
    with pytest.raises(RuntimeError, match=r"^at x=4x64x256: "):  # its accuracy check
        build_checked(problem, config, str(tmp_path / "static"))
    built = build_checked(problem, config, str(tmp_path / "unchecked"), check=False)
    with pytest.raises(TrialFailure, match=r"^candidate at x=4x64x256 process: "):  # its timing
        measure_built(built, problem_shapes(problem), None, LatencyProtocol(max_seconds=0.5))
