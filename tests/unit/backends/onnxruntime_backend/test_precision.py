"""What an ONNX Runtime engine computes in (tuner.backends.onnxruntime.precision): its matrix ops counted,
quantized or float, in the graph the session runs, on a three-MatMul model quantized by ORT's own tools;
the count cached once per optimized graph."""
import os
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tuner.backends.base import engine_precision, get_backend
from tuner.backends.onnxruntime import precision
from tuner.backends.onnxruntime.precision import (
    count_matrix_ops,
    file_precision,
    optimized_precision,
    session_precision,
)
from tuner.execute.evaluate import build
from tuner.problem.spec import load_problem

LAYERS = 3
WIDTH = 32


def _float_model(path: str) -> str:
    """x -> MatMul(w0) -> Relu -> MatMul(w1) -> Relu -> MatMul(w2) -> y, float32."""
    rng = np.random.default_rng(0)
    nodes, inits, last = [], [], "x"
    for i in range(LAYERS):
        inits.append(numpy_helper.from_array(rng.standard_normal((WIDTH, WIDTH)).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [last, f"w{i}"], [f"m{i}"], name=f"fc{i}"))
        last = f"m{i}"
        if i < LAYERS - 1:
            nodes.append(helper.make_node("Relu", [last], [f"r{i}"], name=f"relu{i}"))
            last = f"r{i}"
    nodes[-1].output[0] = "y"
    graph = helper.make_graph(nodes, "three", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, WIDTH])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, WIDTH])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


class _Reader:
    def __init__(self):
        self.batches = iter([{"x": np.random.default_rng(i).standard_normal((4, WIDTH)).astype(np.float32)}
                             for i in range(4)])

    def get_next(self):
        return next(self.batches, None)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from onnxruntime.quantization import QuantFormat, quantize_dynamic, quantize_static

    d = tmp_path_factory.mktemp("ortprec")
    fp32 = _float_model(str(d / "fp32.onnx"))
    quantize_dynamic(fp32, str(d / "dyn.onnx"), nodes_to_exclude=["fc1"])
    quantize_static(fp32, str(d / "qdq.onnx"), _Reader(), quant_format=QuantFormat.QDQ)
    return {"fp32": fp32, "dyn": str(d / "dyn.onnx"), "qdq": str(d / "qdq.onnx")}


def test_float_ops_are_counted_with_their_type(models):
    counted = session_precision(models["fp32"], {})
    assert counted["quantized_nodes"] == 0 and counted["float_nodes"] == LAYERS and counted["inference"] == "f32"
    assert counted["quantized"] == [] and "ONNX Runtime" in counted["source"]


def test_dynamic_int8_counts_the_quantized_layers_and_the_one_kept_in_float(models):
    in_file = file_precision(models["dyn"])  # DynamicQuantizeLinear + MatMulInteger per quantized layer
    assert (in_file["quantized_nodes"], in_file["float_nodes"], in_file["quantized"]) == (LAYERS - 1, 1, ["int8"])
    run = session_precision(models["dyn"], {"graph_optimization_level": "all"})  # fused: DynamicQuantizeMatMul
    assert (run["quantized_nodes"], run["float_nodes"], run["inference"]) == (LAYERS - 1, 1, "f32")


def test_a_qdq_model_runs_int8_only_where_the_optimizer_fuses_it(models):
    assert count_matrix_ops(onnx.load(models["qdq"]))["float_nodes"] == LAYERS  # DQ -> MatMul -> Q in the file
    fused = session_precision(models["qdq"], {"graph_optimization_level": "all"})
    assert (fused["quantized_nodes"], fused["float_nodes"]) == (LAYERS, 0), fused
    # below `extended` the QDQ pairs stay: every MatMul runs in float on dequantized values
    unfused = session_precision(models["qdq"], {"graph_optimization_level": "basic"})
    assert (unfused["quantized_nodes"], unfused["float_nodes"], unfused["inference"]) == (0, LAYERS, "f32"), unfused


def test_an_engine_without_the_method_reports_nothing_and_a_failing_one_says_why():
    class Bare:
        pass

    class Broken:
        def compute_precision(self):
            raise RuntimeError("no runtime model")

    assert engine_precision(Bare()) == {}
    assert engine_precision(Broken()) == {"error": "RuntimeError: no runtime model"}


@pytest.fixture
def sessions(tmp_path, monkeypatch):
    """An empty cache of its own, and the counting sessions built: their settings, one entry per session."""
    monkeypatch.setenv("TUNER_CACHE", str(tmp_path / "cache"))
    built = []

    def counting(model_path, settings, *args, **kwargs):
        built.append(settings)
        return real(model_path, settings, *args, **kwargs)

    real = precision.make_session
    monkeypatch.setattr(precision, "make_session", counting)
    return built


def test_threads_execution_mode_and_spinning_share_one_counting_session(models, sessions):
    first = session_precision(models["qdq"], {"graph_optimization_level": "all", "intra_op_num_threads": 4,
                                              "execution_mode": "sequential", "intra_op_spinning": True,
                                              "disabled_optimizers": []})
    again = session_precision(models["qdq"], {"graph_optimization_level": "all", "intra_op_num_threads": 1,
                                              "execution_mode": "parallel", "inter_op_num_threads": 2,
                                              "intra_op_spinning": False})
    default = session_precision(models["qdq"], {})  # level all, nothing disabled: the same graph
    assert len(sessions) == 1
    assert first == again == default == optimized_precision(models["qdq"], {"graph_optimization_level": "all"})
    assert (first["quantized_nodes"], first["float_nodes"]) == (LAYERS, 0)


def test_level_disabled_optimizers_and_model_bytes_each_get_their_own_entry(models, sessions, tmp_path):
    model = str(tmp_path / "model.onnx")  # one path, rewritten as each route rewrites its model.onnx
    shutil.copy(models["qdq"], model)
    variants = [{"graph_optimization_level": "all"}, {"graph_optimization_level": "basic"},
                {"graph_optimization_level": "all", "disabled_optimizers": ["QDQSelectorActionTransformer"]}]
    counts = [session_precision(model, v) for v in variants]
    shutil.copy(models["fp32"], model)
    counts.append(session_precision(model, variants[0]))
    assert len(sessions) == 4 and len(os.listdir(tmp_path / "cache")) == 4
    assert [(c["quantized_nodes"], c["float_nodes"]) for c in counts] == [(LAYERS, 0), (0, LAYERS), (0, LAYERS), (0, LAYERS)]
    assert counts[1]["source"].endswith("level basic") and counts[2]["source"].endswith("level all")
    shutil.copy(models["qdq"], model)
    assert [session_precision(model, v) for v in variants] == counts[:3] and len(sessions) == 4  # all cached


def test_a_cache_that_fails_costs_a_session_never_the_count(models, sessions, tmp_path, monkeypatch):
    expected = optimized_precision(models["dyn"], {})
    session_precision(models["dyn"], {})
    (entry,) = os.listdir(tmp_path / "cache")
    (tmp_path / "cache" / entry).write_text("{half")  # unreadable: counted again and rewritten
    assert session_precision(models["dyn"], {}) == expected and len(sessions) == 3
    assert session_precision(models["dyn"], {}) == expected and len(sessions) == 3
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv("TUNER_CACHE", str(tmp_path / "not-a-folder"))  # neither readable nor writable
    assert session_precision(models["dyn"], {}) == expected and len(sessions) == 4
    gone = str(tmp_path / "gone.onnx")  # a model that cannot be hashed: counted (here: failing) as before
    with pytest.raises(Exception, match="gone.onnx"):
        session_precision(gone, {})
    assert len(sessions) == 5


@pytest.mark.parametrize("route", ["fp32", "int8-dynamic"])
def test_the_cached_count_of_a_demo_engine_is_the_uncached_one(demo_path, sessions, tmp_path, route):
    problem = load_problem(demo_path, shapes=["x=2x64x256"], n_batches=1, n_calib=1)
    engine, _, _ = build(problem, {"backend": "onnxruntime", "precision": route, "intra_op_num_threads": 2},
                         str(tmp_path / "build"))
    try:
        uncached = optimized_precision(engine.model_path, engine.settings)
        counted, cached = engine.compute_precision(), engine.compute_precision()
        saved = engine.save(str(tmp_path / "saved"))
    finally:
        engine.close()
    assert len(sessions) == 2 and counted == cached == uncached and uncached["float_nodes"] > 0
    assert (uncached["quantized_nodes"] > 0) == (route == "int8-dynamic"), uncached
    loaded = get_backend("onnxruntime").load(os.path.dirname(saved))  # same bytes elsewhere: the same entry
    try:
        assert engine_precision(loaded) == uncached and len(sessions) == 2
    finally:
        loaded.close()
