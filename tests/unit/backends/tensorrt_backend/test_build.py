"""The decisions a TensorRT build makes (tuner.backends.tensorrt.build), without TensorRT: the strongly
typed flag, the tactic-source mask, the parser's error line and the layer names a config keeps in float."""
from tuner.backends.tensorrt.build import matches, parser_error_line, tactic_mask, wants_strongly_typed_flag


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
