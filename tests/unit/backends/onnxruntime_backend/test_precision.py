"""What an ONNX Runtime engine computes in (tuner.backends.onnxruntime.precision): its matrix ops counted,
quantized or float, in the graph the session runs, on a three-MatMul model quantized by ORT's own tools."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tuner.backends.base import engine_precision
from tuner.backends.onnxruntime.precision import count_matrix_ops, file_precision, session_precision

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
