"""`tuner evaluate` of one config on real builds: every route builds and runs, keeping layers in float
restores accuracy, models ONNX Runtime's quantizers find awkward (opset 11, weights in Constant nodes)
still quantize, and the session settings a config names reach ONNX Runtime."""
import os

import onnx
import pytest

from tuner.cli.main import main
from tuner.execute.timing import measure
from tuner.inputs.space import SPACES_DIR
from tuner.measure.latency import LatencyProtocol
from tuner.problem.spec import config_from_sets, load_problem

FAST = LatencyProtocol(warmup=1, min_runs=3, max_runs=5, max_seconds=1)
SHAPE = ["x=2x64x256"]


@pytest.fixture(scope="module")
def problem(tmp_path_factory):
    from tuner.cli.demo import write_demo_model

    path = write_demo_model(str(tmp_path_factory.mktemp("m") / "demo.onnx"))
    # ONNX Runtime's space: where OpenVINO is installed the default is cpu.yaml (tests/integration/test_tune_across_backends.py)
    return load_problem(path, os.path.join(SPACES_DIR, "onnxruntime-cpu.yaml"), shapes=SHAPE, require="cos<=0.005", n_batches=2)


@pytest.mark.parametrize("route", ["fp32", "int8-dynamic", "int8-static", "int4-weight", "fp16"])
def test_every_route_builds_and_runs(problem, route, tmp_path):
    rec = measure(problem, config_from_sets(problem, [f"precision={route}"]), str(tmp_path), FAST)
    assert all(v == v and v != float("inf") for v in rec.metrics.values())
    if route == "fp32":
        assert rec.metrics["rel_l2"] < 1e-5
    if route.startswith("int"):
        assert rec.metrics["rel_l2"] > 1e-3
    assert rec.median_ms > 0
    # what the engine computes in, as its optimized graph says: the route was applied, not only run
    # (ONNX Runtime's CPU provider runs an fp16 graph's MatMuls in f32 behind inserted Casts: as run, f32)
    as_run = rec.precision
    want = {"fp32": [], "fp16": [], "int8-dynamic": ["int8"], "int8-static": ["int8"], "int4-weight": ["int4"]}[route]
    assert (as_run["inference"], as_run["quantized"]) == ("f32", want), as_run
    assert (as_run["quantized_nodes"] > 0) == bool(want) and as_run["float_nodes"] + as_run["quantized_nodes"] > 0
    # and the engine's own graph is the route's: fp16 weights in the fp16 engine, none elsewhere
    engine = onnx.load(os.path.join(rec.engine_dir, "model.onnx"))
    halves = [i.name for i in engine.graph.initializer if i.data_type == onnx.TensorProto.FLOAT16]
    assert bool(halves) == (route == "fp16"), halves[:3]


def test_excluding_every_quantizable_node_restores_accuracy(problem, tmp_path):
    cfg = config_from_sets(problem, ["precision=int8-dynamic"])
    cfg["keep_float"] = sorted(n for n, op in problem.graph_nodes if op in ("MatMul", "Gemm", "Conv"))
    rec = measure(problem, cfg, str(tmp_path), FAST)
    assert rec.metrics["rel_l2"] < 1e-4


def test_opset11_model_works_with_per_channel_static(tmp_path):
    # The demo uses LayerNormalization (opset 17), so an opset-11 export is built by hand here.
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 16)).astype("f"), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                           helper.make_node("Relu", ["h"], ["y"], name="relu")],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 7
    path = str(tmp_path / "op11.onnx")
    onnx.save(model, path)
    p = load_problem(path, n_batches=2)
    rec = measure(p, config_from_sets(p, ["precision=int8-static", "static_per_channel=true"]), str(tmp_path / "e"), FAST)
    assert rec.metrics["cos"] < 0.05


def test_cli_evaluate_and_space(demo_path, tmp_path, capsys):
    assert main(["space", demo_path]) == 0
    assert "keep_float" in capsys.readouterr().out
    assert main(["evaluate", demo_path, "--shape", "x=1x64x256", "--set", "precision=int8-dynamic", "--require", "cos<=0.01",
                 "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "median" in out and "requirement cos<=0.01" in out


@pytest.mark.parametrize("route", ["int8-dynamic", "int8-static"])
def test_weights_in_constant_nodes_are_quantized(tmp_path, route):
    # paddle2onnx (PP-OCR) writes weights as Constant nodes; ORT's quantizers want initializers.
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    wconst = helper.make_node("Constant", [], ["w"], name="w_const",
                              value=numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype("f"), "w"))
    bconst = helper.make_node("Constant", [], ["b"], name="b_const",
                              value=numpy_helper.from_array(rng.standard_normal(8).astype("f"), "b"))
    conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", pads=[1, 1, 1, 1])  # the bias path needs it
    g = helper.make_graph([wconst, bconst, conv], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])])
    path = str(tmp_path / "const.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    p = load_problem(path, n_batches=2)
    rec = measure(p, config_from_sets(p, [f"precision={route}"]), str(tmp_path / "e"), FAST)
    built = onnx.load(str(tmp_path / "e" / "model.onnx"))
    ops = {n.op_type for n in built.graph.node}
    assert ops & {"ConvInteger", "DequantizeLinear"}, ops  # the Conv's weight was quantized
    assert rec.metrics["cos"] < 0.05


def test_sessions_timed_side_by_side_stop_spinning_after_a_run(demo_path):
    # Idle sessions that keep spinning take the cores from the one being timed (bench/interleave_bench.py).
    from tuner.backends.onnxruntime.session import make_session

    def stop_entry(settings, side_by_side):
        opts = make_session(demo_path, settings, side_by_side).get_session_options()
        try:
            return opts.get_session_config_entry("session.force_spinning_stop")
        except RuntimeError as exc:  # ORT's answer for a key never set; any other error fails the test
            if "does not have configuration with key" not in str(exc):
                raise
            return None

    assert stop_entry({}, side_by_side=True) == "1"
    assert stop_entry({}, side_by_side=False) is None  # the exported engine keeps ORT's behaviour
    assert stop_entry({"intra_op_spinning": False}, side_by_side=True) is None


def test_models_fed_the_same_inputs_keep_their_own_calibration_ranges(problem, tmp_path):
    # Calibration ranges are cached; keyed by the data alone, a second model with the same input
    # feed read the first one's ranges and int8-static failed on every tensor it lacked.
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((256, 32)).astype(np.float32), "other_w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "other_w"], ["other_mm"]), helper.make_node("Relu", ["other_mm"], ["y"])],
        "other", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64, 32])], [w])
    other_path = str(tmp_path / "other.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), other_path)
    other = load_problem(other_path, shapes=SHAPE, require="cos<=0.01", n_batches=2)
    assert other.data_hash == problem.data_hash  # the same feed: only the model tells them apart
    static = ["precision=int8-static"]
    measure(problem, config_from_sets(problem, static), str(tmp_path / "demo"), FAST)
    rec = measure(other, config_from_sets(other, static), str(tmp_path / "other"), FAST)
    assert rec.metrics["cos"] < 0.01


def test_disable_gelu_fusion_really_turns_the_fusion_off(demo_path, tmp_path):
    """ORT ignores optimizer names it does not have (1.32 has GeluFusionL1/L2, no GeluFusion): the
    names the space's parameter becomes must be ones that change the optimized graph."""
    import onnxruntime as ort

    from tuner.backends.onnxruntime.session import session_settings

    def optimized_ops(config):
        so = ort.SessionOptions()
        so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        ort.InferenceSession(demo_path, so, providers=["CPUExecutionProvider"],
                             disabled_optimizers=session_settings(config)["disabled_optimizers"] or None)
        return {n.op_type for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node}

    assert {"Gelu", "BiasGelu"} & optimized_ops({})  # the demo's erf Gelu is fused by default
    assert not {"Gelu", "BiasGelu", "FastGelu"} & optimized_ops({"disable_GeluFusion": True})


def test_a_candidate_slower_than_the_slow_run_limit_stops_in_its_accuracy_check(problem, tmp_path):
    """give_up_above 0.001: the limit is 3 x 0.001 x the baseline's run, which any real engine is slower
    than, so the candidate ends after its first warm run: one batch's metrics, a one-run bound, no timing."""
    fp32 = config_from_sets(problem, ["precision=fp32"])
    rec = measure(problem, config_from_sets(problem, ["precision=int8-dynamic"]), str(tmp_path), FAST,
                  baseline=fp32, give_up_above=0.001)
    assert rec.relative["stopped"] == "slow run" and rec.relative["rounds"] == 1 and not rec.relative["converged"]
    assert rec.latency["count"] == 1 and rec.baseline_latency["count"] == 1 and "cos" in rec.metrics
    assert rec.timing_window is None  # nothing was timed under the timing lock: no window to overlap another
