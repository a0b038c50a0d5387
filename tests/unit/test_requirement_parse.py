"""Space files, requirements and the CLI's refusals: no engine is built here."""
import pytest

from tuner.cli import main
from tuner.errors import UserError
from tuner.measure.requirement import Requirement
from tuner.space import load_space


def test_bad_space_field_is_named(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("parameters:\n  precision: {type: categorical, choices: [fp32], default: fp32, colour: red}\n")
    with pytest.raises(UserError, match=r"parameters\.precision.*colour"):
        load_space(str(f))
    f.write_text("parameters:\n  a: {type: bool, default: false, when: {nope: [1]}}\n")
    with pytest.raises(UserError, match="unknown parameter 'nope'"):
        load_space(str(f))


@pytest.mark.parametrize("text", ["cos<0.1", "nosuch<=1", "cos<=abc", "module_without_fn<=1"])
def test_bad_requirement_refused(text):
    with pytest.raises(UserError):
        Requirement.parse(text)


def test_requirement_parses_several():
    r = Requirement.parse("cos<=0.005,rel_l2<=0.01")
    assert [b.metric for b in r.bounds] == ["cos", "rel_l2"]
    assert r.holds({"cos": 0.001, "rel_l2": 0.001}) and not r.holds({"cos": 0.01, "rel_l2": 0.001})


def test_cli_user_errors_are_one_line(tmp_path, capsys, demo_path):
    bad = tmp_path / "x.onnx"
    bad.write_text("not a model")
    assert main(["evaluate", str(bad)]) == 2
    assert "not an ONNX model" in capsys.readouterr().err
    assert main(["evaluate", demo_path]) == 2
    assert "--shape x=" in capsys.readouterr().err
