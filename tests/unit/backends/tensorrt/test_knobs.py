"""The TensorRT backend's pure logic, without TensorRT: which knobs each version has (versions taken from
the shipped Python bindings, see the README), the decisions the build makes from them, tensor types,
and the study's timing-cache files. Nothing here stands in for what TensorRT computes."""
import os

import numpy as np
import pytest

from tuner.backends.cuda_rt import cuda_version_text
from tuner.backends.tensorrt import timing_cache as tc
from tuner.backends.tensorrt.bf16 import bf16_bits_to_float32, float32_to_bf16_bits
from tuner.backends.tensorrt.build import matches, parser_error_line, tactic_mask, wants_strongly_typed_flag
from tuner.backends.tensorrt.engine import np_dtype, to_engine, to_float32
from tuner.backends.tensorrt.knobs import KNOBS, knows, split_config, unsupported
from tuner.backends.tensorrt.library import parse_version
from tuner.space import SPACES_DIR, load_space

CONFIG = {
    "precision": "fp16", "builder_optimization_level": 4, "tiling_optimization_level": "fast", "max_num_tactics": 16,
    "tactic_cublas": True, "tactic_jit_convolutions": False, "typing": "weak", "pin_tactics": True,
    "route/conv_use_long_w": "off", "cuda_graph": True,
}


def dropped_names(version: str) -> set[str]:
    kept, dropped = split_config(CONFIG, parse_version(version))
    assert set(kept) | {line.split(" has no ")[1].split(" ")[0] for line in dropped} == set(CONFIG)
    assert all("\n" not in line and line.startswith("tensorrt ") for line in dropped)
    return set(CONFIG) - set(kept)


@pytest.mark.parametrize("version, dropped", [
    ("10.3.0", {"tiling_optimization_level", "max_num_tactics", "pin_tactics", "route/conv_use_long_w"}),
    ("10.4.0", {"tiling_optimization_level", "pin_tactics", "route/conv_use_long_w"}),
    ("10.8.0.43", {"route/conv_use_long_w"}),
    ("10.16.1.11", {"route/conv_use_long_w"}),
    ("11.0.0.114", {"tactic_cublas", "typing", "route/conv_use_long_w"}),
    ("11.1.0.106", {"tactic_cublas", "typing"}),
    ("11.4.0.106", {"tactic_cublas", "typing"}),
])
def test_a_knob_the_version_lacks_is_dropped(version, dropped):
    assert dropped_names(version) == dropped


def test_drop_line_names_the_api_and_versions():
    _, dropped = split_config({"max_num_tactics": 16, "tactic_cudnn": True}, parse_version("11.0"))
    assert dropped == ["tensorrt 11.0 has no tactic_cudnn (IBuilderConfig.set_tactic_sources(mask | 1 << "
                       "int(TacticSource.CUDNN)); TensorRT 10.0-11.0 (excl.)): tactic_cudnn=True not set"]
    _, dropped = split_config({"max_num_tactics": 16}, parse_version("10.3.0"))
    assert "IBuilderConfig.max_num_tactics; TensorRT 10.4+" in dropped[0]
    assert unsupported(["precision", "tiling_optimization_level", "route/x"], parse_version("10.7")) == [
        "tiling_optimization_level", "route/x"]


def test_knows_every_name_whatever_the_version():
    assert all(knows(n) for n in list(KNOBS) + ["precision", "route/anything", "int8_op_types"])
    assert not knows("intra_op_num_threads")
    assert parse_version("10.8.0.43") == (10, 8, 0) and parse_version("11.1") == (11, 1, 0)
    with pytest.raises(ValueError):
        parse_version("dev")


def test_the_space_file_names_known_knobs_with_their_versions():
    path = os.path.join(SPACES_DIR, "tensorrt.yaml")
    space = load_space(path)
    assert all(knows(p.name) for p in space.params)
    text = open(path).read()
    for p in space.params:
        knob = KNOBS.get(p.name)
        if knob is not None and knob.since > (10, 0, 0):
            assert f"({knob.versions().split(' ')[0]})" in text, p.name  # e.g. "(10.8+)" in its comment


def test_strongly_typed_flag_only_on_10x():
    assert wants_strongly_typed_flag((10, 8, 0), "strong")  # opt-in there
    assert not wants_strongly_typed_flag((10, 8, 0), "weak")
    assert not wants_strongly_typed_flag((11, 1, 0), "strong")  # always strongly typed; the flag is ignored


def test_tactic_mask():
    # Bit positions as the headers give them: 10.x CUBLAS 0, CUBLAS_LT 1, CUDNN 2, EDGE_MASK 3, JIT 4; 11.x EDGE_MASK 0, JIT 1.
    v10 = {"tactic_cublas": 0, "tactic_cublas_lt": 1, "tactic_cudnn": 2, "tactic_edge_mask_convolutions": 3,
           "tactic_jit_convolutions": 4}
    assert tactic_mask(v10, 0b11000, {"tactic_edge_mask_convolutions": False, "tactic_cudnn": True}) == 0b10100
    v11 = {"tactic_edge_mask_convolutions": 0, "tactic_jit_convolutions": 1}
    assert tactic_mask(v11, 0b11, {"tactic_edge_mask_convolutions": False, "precision": "fp16"}) == 0b10


def test_parser_error_is_one_line_and_layer_names_match_their_node():
    line = parser_error_line("/x/model.onnx", [{"desc": "unsupported op", "node": "a/b", "op": "Foo"},
                                               {"desc": "x", "node": "", "op": ""}])
    assert line.startswith("TensorRT could not parse model.onnx at node 'a/b' (Foo): unsupported op (+1 more)")
    assert "\n" not in line
    assert matches("n1", {"n1"}) and matches("n1_2", {"n1"}) and not matches("n10", {"n1"})


def test_tensor_types_and_bf16_rounding():
    x = np.array([1.0, 1.00390625, 1.01171875, -3.14159, 1e30, np.nan, 0.0], dtype=np.float32)
    y = bf16_bits_to_float32(float32_to_bf16_bits(x))
    assert y[0] == 1.0 and y[1] == 1.0  # tie to even
    assert y[2] == np.float32(1.015625)  # above the tie: rounds up
    assert abs(y[3] + 3.140625) < 1e-7 and np.isnan(y[5]) and y[6] == 0.0
    assert np.allclose(y[4], 1e30, rtol=2 ** -8)
    assert np_dtype("HALF") == np.float16 and np_dtype("BF16") == np.uint16
    bits = to_engine(np.array([1.5, -2.0], dtype=np.float32), "BF16")
    assert bits.dtype == np.uint16 and to_float32(bits, "BF16").tolist() == [1.5, -2.0]
    assert to_float32(np.ones(2, np.float16), "HALF").dtype == np.float32
    with pytest.raises(TypeError):
        np_dtype("FP8")
    assert cuda_version_text(12080) == "12.8" and cuda_version_text(13000) == "13.0"


K1, K2 = "0x" + "ab" * 16, "0x" + "01" * 16


def test_tactics_file_round_trip():
    text = tc.encode_tactics({K1: (0x665DED9ABBF88, 0.011264), K2: (2**63 + 5, 1.5)}, {"tensorrt": "11.1"})
    assert '"tactic": "0x665ded9abbf88"' in text  # hashes as hex: they do not fit in a double
    assert tc.decode_tactics(text) == {K1: (0x665DED9ABBF88, 0.011264), K2: (2**63 + 5, 1.5)}
    with pytest.raises(ValueError, match="not a timing cache key"):
        tc.encode_tactics({"0x12": (1, 1.0)})


def test_caches_are_per_study_version_and_gpu(tmp_path):
    a = tc.scope_dir(str(tmp_path), "bert", "10.8.0.43", "NVIDIA H200")
    assert a.endswith(os.path.join("tensorrt", "bert", "10.8.0.43-nvidia-h200"))
    assert len({a, tc.scope_dir(str(tmp_path), "bert-tpe", "10.8.0.43", "NVIDIA H200"),
                tc.scope_dir(str(tmp_path), "bert", "10.8.0.43", "NVIDIA A100")}) == 3


def test_the_fastest_feasible_engine_is_kept_for_pinning(tmp_path):
    scope = str(tmp_path / "scope")
    engines = {}
    for name, data in (("a", b"cache-a"), ("b", b"cache-b"), ("c", b"cache-c")):
        engines[name] = tmp_path / name
        engines[name].mkdir()
        (engines[name] / tc.CACHE_FILE).write_bytes(data)
    (engines["a"] / tc.TACTICS_FILE).write_text("{}")
    assert tc.offer_best(str(engines["a"]), scope, 5.0)
    assert not tc.offer_best(str(engines["b"]), scope, 6.0)  # slower: the best stays
    assert tc.read_bytes(os.path.join(scope, tc.BEST_CACHE)) == b"cache-a"
    assert tc.offer_best(str(engines["c"]), scope, 4.0)
    assert tc.read_bytes(os.path.join(scope, tc.BEST_CACHE)) == b"cache-c"
    assert not os.path.exists(os.path.join(scope, tc.BEST_TACTICS))  # a's tactics went with a
    assert not tc.offer_best(str(tmp_path), scope, 1.0)  # built without a timing cache: nothing to keep
