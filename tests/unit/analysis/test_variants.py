"""Route variants without building anything: attention detection, the variant tables of the backends,
the choice of the variant to rank for, the keep-in-float search conditional on it (and never under
SmoothQuant), the greedy trial's parameters and the printed table."""
import numpy as np
import onnx
import pytest
from needs import backend_or_skip
from onnx import TensorProto, helper, numpy_helper

from tuner.analysis.variants import choose
from tuner.cli.demo import build_demo_model
from tuner.inputs.attention import attention_softmaxes, has_attention, may_have_attention
from tuner.inputs.configs import defaults_chooser, normalize, trial_params, variant_matches
from tuner.inputs.space import load_space
from tuner.report.variants import variant_lines
from tuner.search.enqueue import params_for


def _graph(nodes, inputs, outputs, inits=()):
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)))


def test_attention_is_found_in_the_masked_block_and_the_demo_encoder(masked_attention_path):
    masked = onnx.load(masked_attention_path)
    assert attention_softmaxes(masked.graph) == ["softmax"]  # MatMul -> Add(mask) -> Softmax -> MatMul
    demo = build_demo_model()  # MatMul -> Mul(scale) -> Softmax -> MatMul, per block
    assert attention_softmaxes(demo.graph) == [f"block{b}/attn/softmax" for b in range(4)]


def test_attention_is_found_through_what_exporters_put_after_the_softmax(guarded_attention_path):
    guarded = onnx.load(guarded_attention_path)  # Softmax -> IsNaN/Where -> MatMul, as torch.onnx.export writes it
    assert attention_softmaxes(guarded.graph) == ["softmax"]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 8])
    for between in (["Cast"], ["Dropout"], ["Identity"], ["Cast", "Identity"]):
        nodes = [helper.make_node("MatMul", ["x", "xt"], ["s"], name="scores"),
                 helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
                 helper.make_node("Softmax", ["s"], ["p0"], name="softmax")]
        for i, op in enumerate(between):
            nodes.append(helper.make_node(op, [f"p{i}"], [f"p{i + 1}"], **({"to": TensorProto.FLOAT} if op == "Cast" else {})))
        nodes.append(helper.make_node("MatMul", [f"p{len(between)}", "x"], ["y"], name="context"))
        assert attention_softmaxes(_graph(nodes, [x], [y]).graph) == ["softmax"], between


def test_the_transformer_variants_are_screened_wherever_a_softmax_meets_a_matmul(guarded_attention_path, tmp_path):
    backend_or_skip("openvino")
    from tuner.analysis.quantizing import quantizing_override
    from tuner.analysis.variants import variant_setups
    from tuner.inputs.space import SPACES_DIR
    from tuner.problem.spec import load_problem

    problem = load_problem(guarded_attention_path, f"{SPACES_DIR}/openvino-cpu.yaml", shapes=["x=2x16x32", "mask=2x16"],
                           int_ranges=["mask=0:2"], n_batches=1)
    override = quantizing_override(problem, "int8")
    types = [s["options"].get("int8_model_type") for s in variant_setups(problem, override, "int8", None, {})]
    assert types.count("transformer") == 4 and types[0] == "none"  # the space's defaults first
    # a graph with no attention pattern at all, but a Softmax and a MatMul: screened all the same
    head = _graph([helper.make_node("MatMul", ["a", "w"], ["l"], name="fc"), helper.make_node("Softmax", ["l"], ["b"])],
                  [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 8])],
                  [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 8])],
                  [numpy_helper.from_array(np.ones((8, 8), np.float32), "w")])
    assert not has_attention(head) and may_have_attention(head)


def test_a_softmax_classifier_head_is_not_attention():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    w = numpy_helper.from_array(np.ones((8, 4), np.float32), "w")
    head = _graph([helper.make_node("MatMul", ["x", "w"], ["logits"], name="fc"),
                   helper.make_node("Softmax", ["logits"], ["y"], name="softmax")], [x], [y], [w])
    assert not has_attention(head)  # MatMul -> Softmax, but nothing multiplies the probabilities
    relu = _graph([helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"), helper.make_node("Relu", ["h"], ["r"]),
                   helper.make_node("Softmax", ["r"], ["p"], name="softmax"),
                   helper.make_node("MatMul", ["p", "w2"], ["y"], name="out")], [x], [y],
                  [w, numpy_helper.from_array(np.ones((4, 4), np.float32), "w2")])
    assert not has_attention(relu)  # a Relu between: not a scaled dot product


def test_the_backends_offer_a_handful_of_variants_and_transformer_ones_where_attention_may_be():
    from tuner.backends.onnxruntime.quantize import route_variants as ort_variants

    assert ort_variants("int8-dynamic", True)[0] == {} and len(ort_variants("int8-dynamic", True)) == 4
    assert len(ort_variants("int8-static", False)) == 4 and ort_variants("int4-weight", False) == [{}]
    backend_or_skip("openvino")
    from tuner.backends.openvino.quantize import route_variants

    plain = route_variants("int8", attention=False, vnni=True)
    assert plain[0] == {} and all(v.get("int8_model_type", "none") == "none" for v in plain)
    tf = route_variants("int8", attention=True, vnni=True)
    assert tf[:1] + tf[5:] == plain  # every plain variant is built for a transformer too: measured, never guessed away
    assert len(tf) == 7 and {"int8_overflow_fix": "disable"}.items() <= tf[3].items()
    assert route_variants("int8", attention=True, vnni=False)[3]["int8_overflow_fix"] == "enable"
    # SmoothQuant off in every transformer variant but one (the table's, not the layers'; see the space's unless)
    assert [v.get("int8_smooth_quant") for v in tf if v.get("int8_model_type") == "transformer"] == [False, False, False, True]


def test_choose_takes_the_lowest_error_among_those_not_clearly_slower():
    rows = [{"options": {"t": "none"}, "layers": True, "error": 0.9, "ms": 10.0},
            {"options": {"t": "transformer"}, "layers": True, "error": 0.02, "ms": 11.0},
            {"options": {"t": "transformer", "p": "perf"}, "layers": True, "error": 0.01, "ms": 20.0},  # clearly slower
            {"options": {"t": "transformer", "sq": True}, "layers": False, "error": 0.001, "ms": 9.0},  # no layers
            {"options": {"t": "x"}, "layers": True, "failed": "RuntimeError: boom"}]
    assert choose(rows) == 1
    assert choose(rows, slower=3.0) == 2
    assert choose([{"options": {}, "layers": True, "error": 0.1, "ms": 5.0},
                   {"options": {"a": 1}, "layers": True, "error": 0.1, "ms": 4.0}]) == 0  # a tie: the earlier row
    assert choose([{"options": {}, "layers": True, "error": 0.1010, "ms": 5.0},
                   {"options": {"a": 1}, "layers": True, "error": 0.1000, "ms": 4.0}]) == 0  # within 2%: the same
    assert choose([rows[3], rows[4]]) is None  # nothing built that may keep layers in float
    # timed in turn with the fp32 engine, the ratio decides what is clearly slower, not the milliseconds
    paired = [{"options": {}, "layers": True, "error": 0.5, "ms": 2.0, "ratio": 0.70},
              {"options": {"t": 1}, "layers": True, "error": 0.1, "ms": 3.5, "ratio": 0.80}]
    assert choose(paired) == 1


OV_SPACE = """\
name: ov
backend: openvino
parameters:
  precision: {type: categorical, choices: [fp32, int8, int8-weight], default: fp32}
  inference_precision: {type: categorical, choices: [f32, bf16], default: f32}
  static_shapes: {type: bool, default: false}
  int8_model_type: {type: categorical, choices: [none, transformer], default: none, when: {precision: [int8]}}
  int8_smooth_quant: {type: bool, default: true, when: {precision: [int8], int8_model_type: [transformer]}}
  int8_preset: {type: categorical, choices: [performance, mixed], default: performance, \
when: {precision: [int8], int8_model_type: [none]}}
  int8_preset_transformer: {type: categorical, choices: [performance, mixed], default: mixed, key: int8_preset, \
when: {precision: [int8], int8_model_type: [transformer]}}
layer_overrides:
  keep_float:
    when: {precision: [int8, int8-weight]}
    unless: {int8_smooth_quant: [true]}
    op_types: [MatMul]
    encoding: sensitivity
"""
NODES = [(f"m{i}", "MatMul") for i in range(8)]
VARIANT = {"int8_model_type": "transformer", "int8_smooth_quant": False, "int8_preset": "mixed"}
RANKING = {"keep_float": {"route": {"precision": "int8"} | VARIANT, "variant": VARIANT, "order": [f"m{i}" for i in range(8)],
                          "cut": 2, "nodes": {f"m{i}": [f"m{i}"] for i in range(8)}, "greedy_feasible": True}}


@pytest.fixture
def ov_space(tmp_path):
    path = tmp_path / "ov.yaml"
    path.write_text(OV_SPACE)
    return load_space(str(path))


def test_no_layer_stays_in_float_under_smoothquant(ov_space):
    on = {"precision": "int8", "int8_model_type": "transformer", "int8_smooth_quant": True, "keep_float/m0": True}
    assert "keep_float" not in normalize(ov_space, defaults_chooser(on), NODES)  # no layer asked, none kept
    off = normalize(ov_space, defaults_chooser(on | {"int8_smooth_quant": False}), NODES)
    assert off["keep_float"] == ["m0"]
    assert normalize(ov_space, defaults_chooser({"precision": "int8", "keep_float/m1": True}), NODES)["keep_float"] == ["m1"]


def test_the_ranking_s_layer_parameters_exist_only_under_its_variant(ov_space):
    under = {"precision": "int8", "int8_model_type": "transformer", "int8_smooth_quant": False}
    asked = trial_params(ov_space, defaults_chooser(under), NODES, RANKING)
    assert (asked["keep_float/top_k"] == 2
            and normalize(ov_space, defaults_chooser(under), NODES, RANKING)["keep_float"] == ["m0", "m1"])
    for other in ({"int8_preset_transformer": "performance"}, {"int8_model_type": "none"}):
        params = trial_params(ov_space, defaults_chooser(under | other), NODES, RANKING)
        assert not any("/" in k for k in params), params  # no top_k, no near: every layer quantized
        assert normalize(ov_space, defaults_chooser(under | other), NODES, RANKING)["keep_float"] == []
    # another route of the same override takes the ranking as it is; a ranking without a variant applies everywhere
    weight = normalize(ov_space, defaults_chooser({"precision": "int8-weight"}), NODES, RANKING)
    assert weight["keep_float"] == ["m0", "m1"]
    assert variant_matches({"route": {"precision": "int8"}, "order": ["m0"]}, {"precision": "int8", "int8_model_type": "none"})


def test_a_ranking_without_layers_asks_nothing(ov_space):
    empty = {"keep_float": RANKING["keep_float"] | {"order": [], "cut": 0, "nodes": {}}}
    under = {"precision": "int8", "int8_model_type": "transformer", "int8_smooth_quant": False}
    assert not any("/" in k for k in trial_params(ov_space, defaults_chooser(under), NODES, empty))
    assert normalize(ov_space, defaults_chooser(under), NODES, empty)["keep_float"] == []


def test_the_greedy_trial_takes_the_variant_and_the_carried_settings_by_config_key(ov_space):
    values = {"precision": "int8", "keep_float/top_k": 2}
    params = params_for(ov_space, NODES, values, False, RANKING, VARIANT | {"inference_precision": "bf16"})
    assert params["int8_model_type"] == "transformer" and params["int8_smooth_quant"] is False
    assert params["int8_preset_transformer"] == "mixed" and "int8_preset" not in params  # the active one of the two
    assert params["inference_precision"] == "bf16" and params["keep_float/top_k"] == 2
    config = normalize(ov_space, defaults_chooser(params), NODES, RANKING)
    assert config["keep_float"] == ["m0", "m1"] and config["int8_preset"] == "mixed"


def test_the_table_names_the_chosen_variant_and_what_came_of_it():
    ranking = RANKING["keep_float"] | {
        "metric": "cos", "fp32_ms": 4.0, "settings": {"inference_precision": "bf16"},
        "route": {"backend": "openvino", "precision": "int8"},
        "variants": [{"options": {"int8_model_type": "none"}, "layers": True, "error": 0.9, "ms": 3.0, "chosen": False},
                     {"options": VARIANT, "layers": True, "error": 0.02, "ms": 3.1, "ratio": 0.78, "chosen": True},
                     {"options": {"int8_smooth_quant": True}, "layers": False, "error": 0.001, "ms": 3.0, "chosen": False},
                     {"options": {"int8_preset": "x"}, "layers": True, "failed": "ValueError: no", "chosen": False}]}
    lines = variant_lines("keep_float", ranking)
    assert lines[0].startswith("route variants of openvino int8 (keep_float)") and "inference_precision=bf16" in lines[0]
    assert "fp32 engine 4.00 ms" in lines[0]
    assert "cos 0.02, 0.78x the fp32 engine (3.10 ms)  (chosen)" in lines[2] and "cos 0.9, 3.00 ms" in lines[1]
    assert "no layer kept in float under it" in lines[3]
    assert "does not build (ValueError: no)" in lines[4]
    assert lines[5].strip() == "layers ranked for the chosen variant; greedy float set: 2 candidates ['m0', 'm1']"
    assert variant_lines("keep_float", {"order": []}) == []  # a ranking stored before variants
    skipped = variant_lines("keep_float", ranking | {"skipped": "every layer quantized meets the requirement"})
    assert skipped[-1].strip() == "layers not ranked: every layer quantized meets the requirement"


def test_the_variants_are_those_the_space_offers_with_bf16_float_parts_only_where_the_cpu_has_it(tmp_path,
                                                                                                  masked_attention_path):
    backend_or_skip("openvino")
    from tuner.analysis.variants import carried_settings, variant_setups
    from tuner.problem.spec import load_problem

    def setups(text, values=None):
        (tmp_path / "s.yaml").write_text(text)
        problem = load_problem(masked_attention_path, str(tmp_path / "s.yaml"), shapes=["x=2x16x32", "mask=2x16"],
                               int_ranges=["mask=0:2"])
        out = variant_setups(problem, problem.space.overrides[0], "int8", None, values or {})
        return problem, out

    problem, got = setups(OV_SPACE)  # loading adapts inference_precision to this CPU (no build)
    offers_bf16 = "bf16" in problem.space.param("inference_precision").choices
    # an expert's settings where the space offers them: static shapes always here, bf16 where the CPU has it
    assert carried_settings(got, problem) == {"static_shapes": True} | ({"inference_precision": "bf16"} if offers_bf16 else {})
    assert all(s["config"]["static_shapes"] is True for s in got)
    assert got[0]["options"] == {"int8_model_type": "none", "int8_preset": "performance"}  # the space's defaults first
    kinds = [(s["options"]["int8_model_type"], s["options"].get("int8_smooth_quant"), s["layers"]) for s in got]
    # attention: TRANSFORMER variants with SmoothQuant off, one with it on, under which no layer stays in float,
    # then the plain preset (the overflow-fix variant is left out: this space has no int8_overflow_fix to set)
    assert kinds == [("none", None, True), ("transformer", False, True), ("transformer", False, True),
                     ("transformer", True, False), ("none", None, True)]
    assert all(s["config"]["keep_float"] == [] and s["config"]["precision"] == "int8" for s in got)
    _, fixed = setups(OV_SPACE, {"int8_model_type": "transformer", "int8_smooth_quant": False})  # --set fixes them
    assert [s["options"]["int8_preset"] for s in fixed] == ["mixed", "performance"]
    problem, f32 = setups(OV_SPACE.replace("choices: [f32, bf16], default: f32", "choices: [f32], default: f32"))
    assert carried_settings(f32, problem) == {"static_shapes": True}
    assert all(s["config"]["inference_precision"] == "f32" for s in f32)
    problem, pinned = setups(OV_SPACE, {"static_shapes": False})  # --set static_shapes=false wins over the expert
    assert "static_shapes" not in carried_settings(pinned, problem) and not any(s["config"]["static_shapes"] for s in pinned)
