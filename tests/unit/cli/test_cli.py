"""The command line: one line per user error (values that mean nothing, misspellings, other tools'
syntax) that leaves no file behind, every option's default stated, a parser that loads nothing heavy.
No engine is built here."""
import argparse
import os
import subprocess
import sys

import pytest

from tuner.cli.main import build_parser, main
from tuner.inputs.space import SPACES_DIR

SPACE = os.path.join(SPACES_DIR, "onnxruntime-cpu.yaml")


def test_report_module_is_light_for_the_cli():
    """Building the CLI parser must not import Optuna or plotly; the figures load on first use."""
    code = ("import sys, tuner.cli.main as c; c.build_parser(); "
            "heavy = [m for m in ('optuna', 'plotly') if m in sys.modules]; assert not heavy, heavy; "
            "from tuner.report import pareto_figure; assert 'plotly' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def _files(root) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs} | {
        os.path.relpath(os.path.join(d, s), root) for d, ss, _ in os.walk(root) for s in ss}


def _one_line_refusal(argv, capsys) -> str:
    code = None
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusals exit from the parser
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def _space_with(tmp_path, old: str, new: str) -> str:
    text = open(SPACE).read()
    assert old in text
    path = tmp_path / "space.yaml"
    path.write_text(text.replace(old, new, 1))
    return str(path)


@pytest.mark.parametrize("argv, message", [
    (["tune", "--study", "nope", "--n-trials", "1"], "needs the model"),
    (["tune", "MODEL", "--study", "s"], "give a budget"),
    (["tune", "MODEL", "--study", "s", "--n-trials", "1", "--sampler", "bayes"], "argument --sampler: invalid choice: 'bayes'"),
    (["tune", "MODEL", "--study", "s", "--n-trials", "1", "--objectives", "speed"],
     "argument --objectives: invalid choice: 'speed'"),
    (["tune", "MODEL", "--study", "s", "--n-trials", "1", "--storage", "redis://x"], "unknown kind"),
    (["status", "--study", "ghost"], "no study 'ghost'"),
])
def test_a_missing_model_or_budget_or_an_unknown_choice_is_one_line_and_writes_nothing(
        argv, message, demo_path, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = [demo_path if a == "MODEL" else a for a in argv]
    assert message in _one_line_refusal(argv, capsys)
    assert _files(tmp_path) == set()


@pytest.mark.parametrize("old, new, message", [
    ("int4-weight, fp16], default: fp32", "int4-weight, fp16, int9-magic], default: fp32",
     "parameters.precision: unknown route 'int9-magic'"),
    ("  intra_op_spinning:", "  bogus_ort_option: {type: bool, default: false}\n  intra_op_spinning:",
     "parameters.bogus_ort_option: no backend of this space (onnxruntime) has such a setting"),
    # ORT ignores an optimizer name it does not have; its log tells the names, so the space is refused
    ("disable_GeluFusion:", "disable_GeluFushion:", "has no graph optimizer 'GeluFushion'; close names: GeluFusion"),
])
@pytest.mark.parametrize("command", ["tune", "evaluate"])
def test_an_unknown_route_or_setting_in_a_space_is_one_line_and_writes_nothing(
        command, old, new, message, tmp_path, capsys, monkeypatch, demo_path):
    space = _space_with(tmp_path, old, new)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    argv = [command, demo_path, "--space", space, "--shape", "x=2x64x256"]
    argv += ["--study", "s", "--n-trials", "1"] if command == "tune" else ["--set", "precision=fp32"]
    assert message in _one_line_refusal(argv, capsys)
    assert _files(work) == set()


@pytest.mark.parametrize("argv, message", [
    (["tune", "MODEL", "--study", "s", "--n-trials", "1", "--trial-timeout", "0"], "'0': a duration must be more than zero"),
    (["tune", "MODEL", "--study", "s", "--timeout", "-5m"], "--timeout: '-5m': a duration must be more than zero"),
    (["tune", "MODEL", "--study", "s", "--n-trials", "1", "--trial-timeout", "-1h"], "'-1h': a duration must be more"),
    (["worker", "--study", "s", "--storage", "sqlite:///s.db", "--timeout", "-5m"], "'-5m': a duration must be more"),
    (["tune", "MODEL", "--study", "s", "--n-trials", "1", "--top-k", "0"], "--top-k: '0': needs a whole number of at least 1"),
    (["select", "--study", "s", "--top-k", "-2"], "--top-k: '-2': needs a whole number of at least 1"),
    (["tune", "MODEL", "--study", "s", "--n-trials", "1", "--max-timing-s", "0"], "--max-timing-s: '0': needs a number"),
    (["tune", "MODEL", "--study", "s", "--n-trials", "1", "--max-timing-s", "-3"], "--max-timing-s: '-3': needs a number"),
    (["worker", "--study", "s", "--storage", "sqlite:///s.db", "--max-timing-s", "0"], "--max-timing-s: '0'"),
    (["tune", "MODEL", "--study", "s", "--n-trials", "1", "--shape", "x=2x64x256", "--int-range", "x=0:10"],
     "--int-range x=0:10: input 'x' is float32, not an integer input"),
    (["tune", "MODEL", "--study", "s", "--n-trials", "1", "--shape", "x=2x64x256", "--int-range", "ids=0:10"],
     "--int-range ids=0:10: the model has no input 'ids'"),
    (["evaluate", "MODEL", "--shape", "x=2x64x256", "--set", "per_channel=true"],
     "--set per_channel: unknown parameter; did you mean dyn_per_channel or static_per_channel?"),
    (["tune", "MODEL", "--study", "s", "--n-trials", "1", "--shape", "x=2x64x256",
      "--enqueue", "precision=int8-dynamic,per_channel=true"],
     "--enqueue 'precision=int8-dynamic,per_channel=true': per_channel: unknown parameter; did you mean "
     "dyn_per_channel or static_per_channel?"),
    (["tune", "MODEL", "--study", "s", "--n-trials", "1", "--shape", "x=2x64x256", "--enqueue", "precision=int9"],
     "--enqueue 'precision=int9': precision=int9: not one of"),
    (["tune", "MODEL", "--study", "s", "--n-trials", "1", "--shape", "x=2x64x256", "--enqueue", "precision=int8-dynamic,=3"],
     "--enqueue 'precision=int8-dynamic,=3': '=3': expected KEY=VALUE"),
    (["evaluate", "MODEL", "--shapes=x:2x64x256"], "here it is --shape x=2x64x256"),
    (["evaluate", "MODEL", "--shapes", "x:2x64x256,mask:2x64"], "here it is --shape x=2x64x256 --shape mask=2x64"),
    (["evaluate", "MODEL", "--shape", "x:[2,64,256]"], "Polygraphy's syntax; here it is --shape x=2x64x256"),
])
def test_values_that_mean_nothing_are_one_line_and_write_nothing(argv, message, tmp_path, capsys, monkeypatch, demo_path):
    monkeypatch.chdir(tmp_path)
    argv = [demo_path if a == "MODEL" else a for a in argv]
    assert message in _one_line_refusal(argv, capsys)
    assert _files(tmp_path) == set()  # a bad --enqueue leaves no half-made study (nor studies/) behind


def test_tuner_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == "engine-tuner 0.1.0"


def test_every_option_states_its_default():
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing = [(name, a.option_strings[0]) for name, p in sub.choices.items() for a in p._actions
               if a.option_strings and a.dest != "help" and not any(w in (a.help or "") for w in ("default", "required"))]
    assert missing == []


def test_space_lists_the_models_inputs(capsys, demo_path):
    assert main(["space", demo_path]) == 0
    out = capsys.readouterr().out
    assert f"inputs of {demo_path}:" in out
    line = next(line for line in out.splitlines() if line.strip().startswith("x "))
    assert "float32" in line and "[batch (dynamic), 64, 256]" in line and "--shape x=Nx64x256" in line


def test_cli_user_errors_are_one_line(tmp_path, capsys, demo_path):
    bad = tmp_path / "x.onnx"
    bad.write_text("not a model")
    assert "not an ONNX model" in _one_line_refusal(["evaluate", str(bad)], capsys)
    assert "--shape x=" in _one_line_refusal(["evaluate", demo_path], capsys)
