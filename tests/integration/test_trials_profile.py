"""`tuner trials`, `tuner profile` and `--ref-outputs` (issue 30, item 8), through the real command line in this
process, on a real 3-trial study of the demo model (small ONNX Runtime space, a winner selected)."""
import csv
import json
import os

import numpy as np
import onnxruntime as ort
import pytest
from cli_run import run_cli

from tuner.cli.main import main
from tuner.errors import UserError
from tuner.inputs.ref_outputs import check_against_engine
from tuner.inputs.space import SPACES_DIR
from tuner.report.profile_table import attribute, onnx_node_of, profile_rows
from tuner.search.trials import speed_key
from tuner.store.storage import load_study

SMALL = os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml")
FAST = ["--space", SMALL, "--max-timing-s", "1", "--quiet"]


def _run(argv, capsys) -> tuple[int, str, str]:
    return run_cli(argv, capsys)


@pytest.fixture(scope="module")
def study(tmp_path_factory, demo_path):
    """3 trials (the baseline, int8-dynamic enqueued, one sampled), the winner selected among the top 2."""
    d = tmp_path_factory.mktemp("trials")
    url = f"sqlite:///{d}/tp.db"
    code = main(["tune", demo_path, "--study", "tp", "--storage", url, "--shape", "x=2x64x256", *FAST, "--n-trials", "3",
                 "--seed", "0", "--enqueue", "precision=int8-dynamic", "--top-k", "2"])
    assert code == 0
    return url, d


def test_trials_prints_one_row_per_trial_and_sorts(study, capsys):
    url, _ = study
    code, out, err = _run(["trials", "--study", "tp", "--storage", url], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:6] == ["trial", "state", "speedup", "ms", "cos", "feasible"]
    rows = lines[1:-1]
    assert [int(r.split()[0]) for r in rows] == [0, 1, 2]
    assert "[baseline]" in rows[0] and " fp32 " in rows[0] and "onnxruntime-" in rows[0]
    assert any(" int8-dynamic " in r for r in rows)
    for r in rows:  # number, state, speedup N.NNx, ms, error, feasible
        cells = r.split()
        assert cells[1] == "complete" and cells[2].endswith("x") and float(cells[3]) > 0 and cells[5] == "yes"
    trials = {t.number: t for t in load_study("tp", url, reading=True).get_trials()}
    code, out, _ = _run(["trials", "--study", "tp", "--storage", url, "--sort", "speed"], capsys)
    order = [int(r.split()[0]) for r in out.splitlines()[1:-1]]
    assert code == 0 and order == sorted(trials, key=lambda n: speed_key(trials[n]))
    code, out, _ = _run(["trials", "--study", "tp", "--storage", url, "--sort", "error"], capsys)
    errors = [float(r.split()[4]) for r in out.splitlines()[1:-1]]
    assert code == 0 and errors == sorted(errors) and errors[0] < 1e-6  # the fp32 baseline first


def test_trials_csv_has_optunas_columns_and_ours(study, capsys, tmp_path):
    url, _ = study
    path = tmp_path / "trials.csv"
    code, out, err = _run(["trials", "--study", "tp", "--storage", url, "--csv", str(path)], capsys)
    assert code == 0, err
    assert f"written to {path}" in out
    with open(path) as f:
        rows = list(csv.DictReader(f))
    assert [r["number"] for r in rows] == ["0", "1", "2"]
    for column in ("datetime_start", "duration", "params_precision", "state", "speedup", "ms", "error", "feasible",
                   "route", "backend", "float_layers", "fail_reason", "metric_cos", "latency_median_ms", "config"):
        assert column in rows[0], column
    assert any(c.startswith("value") for c in rows[0])
    assert rows[0]["baseline"] == "True" and rows[0]["params_precision"] == "fp32"
    assert json.loads(rows[1]["config"])["precision"] in ("fp32", "int8-dynamic")


def test_trials_refuses_a_missing_study_and_a_bad_sort_in_one_line(study, capsys, tmp_path, monkeypatch):
    url, _ = study
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(["trials", "--study", "ghost"], capsys)
    assert code == 2 and "no study 'ghost'" in err and err.count("\n") == 1 and not os.listdir(tmp_path)
    code, out, err = _run(["trials", "--study", "tp", "--storage", url, "--sort", "fastest"], capsys)
    assert code == 2 and "invalid choice: 'fastest'" in err and err.count("\n") == 1


def test_profile_prints_node_shares_of_the_winner_against_the_baseline(study, capsys):
    url, _ = study
    winner = load_study("tp", url, reading=True).user_attrs["winner"]
    code, out, err = _run(["profile", "--study", "tp", "--storage", url], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"the winner (trial {winner['trial']})") and lines[1].startswith("baseline (trial 0)")
    head = next(i for i, line in enumerate(lines) if line.startswith("node "))
    body = lines[head + 1:]
    total = body[-1].split()
    assert total[0] == "total" and total[2] == "100.0%" and float(total[1]) > 0
    rows = [line for line in body[:-2] if not line.startswith("(") or "more)" not in line]
    assert 1 <= len(rows) <= 20
    # the baseline's heaviest nodes are the demo's MatMuls (ffn fc1/fc2), named as in the model
    assert any(r.startswith(f"block{i}/ffn/fc") for r in rows[:8] for i in range(4)), out
    base_ms = [float(r.split()[-5]) for r in rows]
    assert base_ms == sorted(base_ms, reverse=True)
    code, out, err = _run(["profile", "--study", "tp", "--storage", url, "--by", "op", "--limit", "3"], capsys)
    assert code == 0, err
    ops = [line.split()[0] for line in out.splitlines()[4:]]
    assert ops[0] == "MatMul" and "total" in ops and len(ops) <= 3 + 3


def test_profile_of_a_missing_study_is_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = _run(["profile", "--study", "ghost"], capsys)
    assert code == 2 and "no study 'ghost'" in err and err.count("\n") == 1 and not os.listdir(tmp_path)


def test_attribution_maps_runtime_names_back_to_model_nodes():
    nodes = {"b/fc1": "MatMul", "b/fc1_bias": "Add", "b/ln": "LayerNormalization"}
    assert onnx_node_of("b/fc1", nodes) == "b/fc1"
    assert onnx_node_of("b/fc1_quant", nodes) == "b/fc1"
    assert onnx_node_of("b/fc1_bias/MatMulAddFusion/", nodes) == "b/fc1_bias"
    assert onnx_node_of("BiasGelu", nodes) is None
    rows = [{"name": "b/fc1_bias", "op": "FullyConnected", "ms": 2.0, "originals": ["b/fc1_bias"]},
            {"name": "BiasGelu", "op": "BiasGelu", "ms": 1.0}, {"name": "b/ln", "op": "LayerNormalization", "ms": 1.0}]
    table = attribute(rows, list(nodes.items()), {"b/fc1": ["b/fc1_bias"]})  # fc1 vanished into its bias's node
    assert set(table) == {"b/fc1", "(BiasGelu)", "b/ln"} and table["b/fc1"]["ms"] == 2.0
    win = {"b/fc1": {"ms": 0.5, "op": "MatMul", "ran_as": ["MatMulInteger"]}}
    out = profile_rows(table, win, limit=1)
    assert [r["key"] for r in out] == ["b/fc1", "(2 more)", "total"]
    assert out[0]["ratio"] == "0.25" and out[0]["base_share"] == 0.5 and out[1]["ratio"] == "gone"


# ---- --ref-outputs


@pytest.fixture(scope="module")
def ref_files(tmp_path_factory, demo_path):
    """Validation data (2 batches of 2x64x256), ONNX Runtime's fp32 outputs of it scaled by 1.01 as the
    training framework's, and the same scaled by 1.02 (a changed file)."""
    d = tmp_path_factory.mktemp("refs")
    x = np.random.default_rng(0).standard_normal((2, 2, 64, 256)).astype(np.float32)
    np.savez(d / "data.npz", x=x)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(demo_path, so, providers=["CPUExecutionProvider"])
    y = np.stack([session.run(None, {"x": b})[0] for b in x])
    np.savez(d / "refs.npz", y=(y * 1.01).astype(np.float32))
    np.savez(d / "refs2.npz", y=(y * 1.02).astype(np.float32))
    return d


def _baseline_metrics(demo_path, d, url, study, *extra, capsys) -> dict:
    code, _, err = _run(["tune", demo_path, "--study", study, "--storage", url, "--data", str(d / "data.npz"), *FAST,
                         "--no-select", "--n-trials", "1", *extra], capsys)
    assert code == 0, err
    base = load_study(study, url, reading=True).trials[0]
    assert base.user_attrs["baseline"] and base.user_attrs["config"]["precision"] == "fp32"
    return base.user_attrs["metrics"]


def test_a_study_measures_against_the_reference_outputs_stores_them_and_refuses_a_changed_file(
        demo_path, ref_files, capsys, tmp_path):
    d = ref_files
    url = f"sqlite:///{tmp_path}/r.db"
    own = _baseline_metrics(demo_path, d, url, "own", capsys=capsys)
    given = _baseline_metrics(demo_path, d, url, "r", "--ref-outputs", str(d / "refs.npz"), capsys=capsys)
    assert own["rel_l2"] < 1e-5  # the fp32 baseline against ONNX Runtime's fp32 outputs
    assert given["rel_l2"] == pytest.approx(1 - 1 / 1.01, rel=0.02)  # against the framework's (x1.01) outputs
    assert load_study("r", url, reading=True).user_attrs["tuner_settings"]["ref_outputs"] == str(d / "refs.npz")
    # the same path with other contents: other data, refused with or without --force
    os.replace(d / "refs.npz", d / "refs1.npz")
    os.replace(d / "refs2.npz", d / "refs.npz")
    try:
        for force in ([], ["--force"]):
            code, _, err = _run(["tune", "--study", "r", "--storage", url, "--n-trials", "1", *force], capsys)
            assert code == 2 and "validation data here differ" in err and "--ref-outputs" in err, err
    finally:
        os.replace(d / "refs.npz", d / "refs2.npz")
        os.replace(d / "refs1.npz", d / "refs.npz")
    assert len(load_study("r", url, reading=True).trials) == 1


def test_evaluate_measures_against_the_reference_outputs(demo_path, ref_files, capsys):
    d = ref_files
    code, out, err = _run(["evaluate", demo_path, "--space", SMALL, "--data", str(d / "data.npz"), "--out",
                           str(d / "out"), "--ref-outputs", str(d / "refs.npz")], capsys)
    assert code == 0, err
    metrics = json.load(open(d / "out" / "result.json"))["metrics"]
    assert metrics["rel_l2"] == pytest.approx(1 - 1 / 1.01, rel=0.02)


def test_a_reference_shape_the_model_leaves_open_is_checked_against_the_engine():
    refs = {"y": np.zeros((2, 7), np.float32)}
    check_against_engine({"y": np.ones((2, 7), np.float32)}, refs, "r.npz")
    with pytest.raises(UserError, match=r"output 'y' has shape \[2, 7\] per batch, the engine computes \[2, 8\]"):
        check_against_engine({"y": np.ones((2, 8), np.float32)}, refs, "r.npz")
