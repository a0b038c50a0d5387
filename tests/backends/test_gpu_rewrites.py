"""The precision rewrites of the GPU backends (ONNX -> ONNX, what a strongly typed TensorRT network obeys),
run on ONNX Runtime's CPU against fp32: fp16 and bf16 casts and int8 Q/DQ, with nodes kept in float.
The demo model with planted outliers: quantizing its six outlier q/k/v MatMuls is what hurts."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

from tuner.backends.common.onnx_precision import apply_precision, emulate_bf16, output_is_float32, to_bf16, to_fp16, to_int8_qdq
from tuner.cli.demo import write_demo_model

KEEP = [f"block{b}/attn/{p}_proj" for b in (1, 3) for p in "qkv"]  # the outlier-carrying MatMuls (outliers=2)


def batches(n: int, seed: int, shape=(8, 64, 256)) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(n)]


def run(model: onnx.ModelProto, batch: dict[str, np.ndarray]) -> np.ndarray:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return np.asarray(s.run(None, batch)[0], dtype=np.float32)


def cos_error(y: np.ndarray, ref: np.ndarray) -> float:
    """1 - cosine similarity, worst sample (the tuner's `cos`)."""
    a, b = y.reshape(len(y), -1).astype(np.float64), ref.reshape(len(ref), -1).astype(np.float64)
    return float(np.max(1.0 - (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-30)))


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    model = onnx.load(write_demo_model(str(tmp_path_factory.mktemp("rw") / "planted.onnx"), outliers=2))
    test = batches(1, seed=2)[0]
    return model, test, run(model, test)


def types_by_name(model):
    g = onnx.shape_inference.infer_shapes(model, strict_mode=True).graph
    out = {t.name: t.data_type for t in g.initializer}
    out.update({v.name: v.type.tensor_type.elem_type for v in list(g.input) + list(g.value_info) + list(g.output)})
    return out


def node(model, name):
    return next(n for n in model.graph.node if n.name == name)


def test_fp16_runs_close_to_fp32(demo):
    model, test, ref = demo
    m = to_fp16(model)
    assert output_is_float32(m) and any(t.data_type == TensorProto.FLOAT16 for t in m.graph.initializer)
    assert cos_error(run(m, test), ref) < 1e-5
    assert model.graph.initializer[0].data_type == TensorProto.FLOAT  # the input model is untouched


def test_fp16_keeps_nodes_and_ops_in_float(demo):
    model, test, ref = demo
    m = to_fp16(model, keep_nodes=KEEP, keep_ops=["LayerNormalization"])
    types = types_by_name(m)
    for n in KEEP + ["block0/ln1"]:
        assert all(types[i] == TensorProto.FLOAT for i in node(m, n).input if i), n
        assert types[node(m, n).output[0]] == TensorProto.FLOAT
    assert types[node(m, "block0/attn/q_proj").output[0]] == TensorProto.FLOAT16
    assert cos_error(run(m, test), ref) < 1e-5


def test_bf16_graph_is_valid_keeps_io_float_and_nodes_in_float(demo):
    model, _, _ = demo
    m = to_bf16(model, keep_nodes=KEEP, keep_ops=["Softmax"])
    onnx.checker.check_model(m, full_check=True)
    types = types_by_name(m)
    assert output_is_float32(m) and m.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert types[node(m, "block0/attn/q_proj").output[0]] == TensorProto.BFLOAT16
    assert sum(t.data_type == TensorProto.BFLOAT16 for t in m.graph.initializer) > 30  # weights stored in bf16
    for n in KEEP + ["block0/attn/softmax"]:
        assert all(types[i] == TensorProto.FLOAT for i in node(m, n).input if i), n
        assert types[node(m, n).output[0]] == TensorProto.FLOAT


def test_bf16_error_through_emulation(demo):
    """ORT's CPU has no bf16 MatMul, so the bf16 graph runs as fp32 ops over bf16-rounded tensors."""
    model, test, ref = demo
    err = cos_error(run(emulate_bf16(to_bf16(model)), test), ref)
    assert 1e-7 < err < 5e-4  # bf16 rounding is visible, and small


def test_int8_qdq_is_signed_symmetric_and_keeping_the_outliers_restores_accuracy(demo):
    model, test, ref = demo
    calib = batches(2, seed=1)
    q_all = to_int8_qdq(model, calib)
    q_keep = to_int8_qdq(model, calib, keep_nodes=KEEP)
    zps = [t for t in q_all.graph.initializer if t.name.endswith("zero_point")]
    assert zps and all(t.data_type == TensorProto.INT8 and not onnx.numpy_helper.to_array(t).any() for t in zps)
    producers = {o: n.op_type for n in q_keep.graph.node for o in n.output}
    for n in KEEP:
        assert all(producers.get(i) != "DequantizeLinear" for i in node(q_keep, n).input), n
    assert producers[node(q_keep, "block0/attn/q_proj").input[0]] == "DequantizeLinear"
    err_all, err_keep = cos_error(run(q_all, test), ref), cos_error(run(q_keep, test), ref)
    assert err_keep < err_all / 5 and err_keep < 2e-3, (err_all, err_keep)


def test_dispatch(demo):
    model, _, _ = demo
    assert apply_precision(model, {"precision": "fp32"}, []) is model
    m = apply_precision(model, {"precision": "bf16", "lowp_block_list": "norms", "keep_float": KEEP[:1]}, [])
    assert types_by_name(m)[node(m, "block0/ln1").output[0]] == TensorProto.FLOAT
    with pytest.raises(ValueError, match="unknown precision route"):
        apply_precision(model, {"precision": "int4"}, [])
