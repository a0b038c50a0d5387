"""What export says of the shapes its engine serves (winner.export): the study's input shapes in report.json,
and one line where the engine's backend fixed them (OpenVINO's static_shapes, TensorRT's profile)."""
from needs import backend_or_skip

from tuner.backends.base import get_backend
from tuner.winner.export import shapes_line


def test_the_line_names_the_shapes_and_the_option_that_fixed_them():
    report = {"shapes": {"input_ids": [8, 128], "attention_mask": [8, 128]},
              "serves_only_these_shapes": "OpenVINO's static_shapes: true"}
    assert shapes_line(report) == ("the engine serves only the input shapes it was tuned and checked at "
                                   "(input_ids=8x128 attention_mask=8x128): OpenVINO's static_shapes: true; "
                                   "tune at the shapes it will serve")
    assert shapes_line(report | {"serves_only_these_shapes": None}) is None


def test_which_configs_fix_their_shapes():
    assert get_backend("onnxruntime").fixes_shapes({"precision": "int8-dynamic"}) is None
    backend_or_skip("openvino")
    openvino = get_backend("openvino")
    assert openvino.fixes_shapes({"static_shapes": True}) == "OpenVINO's static_shapes: true"
    assert openvino.fixes_shapes({"static_shapes": False}) is None and openvino.fixes_shapes({}) is None
