"""Space files (tuner.inputs.space): a bad field is named; parameters with a config key (`key:`): two that can
be active together may not share one, and a space over several backends normalizes each backend's
parameters under the keys it reads."""
import os

import pytest

from tuner.errors import UserError
from tuner.inputs.configs import defaults_chooser, normalize
from tuner.inputs.space import load_space

TWO_BACKENDS = """\
parameters:
  backend: {type: categorical, choices: [onnxruntime, openvino], default: onnxruntime}
  precision: {type: categorical, choices: [fp32, int8-dynamic], default: fp32, when: {backend: [onnxruntime]}}
  ov_precision: {type: categorical, choices: [fp32, int8], default: fp32, key: precision, %s}
  int8_model_type: {type: categorical, choices: [none, transformer], default: none, when: {ov_precision: [int8]}}
layer_overrides:
  keep_float: {when: {precision: [int8-dynamic]}, op_types: [MatMul]}
  ov_keep_float: {key: keep_float, when: {ov_precision: [int8]}, op_types: [MatMul]}
"""
NODES = [("a", "MatMul"), ("b", "MatMul")]


def _space_file(tmp_path, text):
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return path


def _space(tmp_path, text):
    return load_space(str(_space_file(tmp_path, text)))


def test_parameters_of_different_backends_share_a_key(tmp_path):
    space = _space(tmp_path, TWO_BACKENDS % "when: {backend: [openvino]}")
    assert space.backends == ["onnxruntime", "openvino"] and space.param("ov_precision").key == "precision"
    assert normalize(space, defaults_chooser(), NODES) == {"backend": "onnxruntime", "precision": "fp32"}
    ov = normalize(space, defaults_chooser({"backend": "openvino", "ov_precision": "int8", "ov_keep_float/b": True}), NODES)
    assert ov == {"backend": "openvino", "precision": "int8", "int8_model_type": "none", "keep_float": ["b"]}
    assert space.backends_of(space.overrides[1].when) == ["openvino"]  # through ov_precision's own condition
    assert space.route_param(space.overrides[1]) == ("ov_precision", ["int8"])


@pytest.mark.parametrize("condition", ["when: {}", "when: {backend: [onnxruntime, openvino]}"])
def test_two_parameters_that_can_be_active_together_may_not_share_a_key(tmp_path, condition):
    with pytest.raises(UserError, match=r"parameters\.ov_precision\.key: parameters\.precision writes config key "
                                        r"'precision' too"):
        _space(tmp_path, TWO_BACKENDS % condition)


def test_overrides_sharing_a_key_need_exclusive_conditions_too(tmp_path):
    text = TWO_BACKENDS % "when: {backend: [openvino]}"
    text = text.replace("ov_keep_float: {key: keep_float, when: {ov_precision: [int8]}",
                        "ov_keep_float: {key: keep_float, when: {backend: [onnxruntime, openvino]}")
    with pytest.raises(UserError, match=r"layer_overrides\.ov_keep_float\.key"):
        _space(tmp_path, text)


def test_removing_a_choice_removes_what_depends_on_it(tmp_path):
    space = _space(tmp_path, TWO_BACKENDS % "when: {backend: [openvino]}")
    backend = space.param("backend")
    left = space.with_param("backend", type(backend)(**{**backend.__dict__, "choices": ["onnxruntime"]}))
    assert [p.name for p in left.params] == ["backend", "precision"] and [o.name for o in left.overrides] == ["keep_float"]


def test_bad_space_field_is_named(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("parameters:\n  precision: {type: categorical, choices: [fp32], default: fp32, colour: red}\n")
    with pytest.raises(UserError, match=r"parameters\.precision.*colour"):
        load_space(str(f))
    f.write_text("parameters:\n  a: {type: bool, default: false, when: {nope: [1]}}\n")
    with pytest.raises(UserError, match="unknown parameter 'nope'"):
        load_space(str(f))


def test_a_builtin_space_is_named_without_its_path(tmp_path, monkeypatch):
    from tuner.inputs.space import SPACES_DIR, load_space, space_file

    monkeypatch.chdir(tmp_path)
    assert space_file("onnxruntime-cpu-small") == os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml")
    assert load_space("onnxruntime-cpu-small").path == space_file("onnxruntime-cpu-small")
    (tmp_path / "onnxruntime-cpu-small").write_text("a file of that name here wins")
    assert space_file("onnxruntime-cpu-small") == "onnxruntime-cpu-small"
    with pytest.raises(UserError, match="built-in space: cpu, onnxruntime-cpu,"):
        load_space("no-such-space")


def test_the_help_names_the_default_space_as_it_is():
    from tuner.cli.main import build_parser
    from tuner.inputs.space import DEFAULT_SPACE

    default = os.path.splitext(os.path.basename(DEFAULT_SPACE))[0]
    for command in ("space", "tune", "evaluate", "sensitivity"):
        sub = build_parser()._subparsers._group_actions[0].choices[command]
        text = next(a.help for a in sub._actions if "--space" in a.option_strings)
        assert f"default: {default}" in text or f"else {default}" in text, (command, text)
