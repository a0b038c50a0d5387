"""The problem a study measures (tuner.problem.spec): the notes on what it cannot know, and the config a list
of --set values makes, with conditional parameters dropped or refused. No engine is built here."""
import os

import numpy as np
import pytest

from tuner.errors import UserError
from tuner.inputs.configs import config_key
from tuner.inputs.space import SPACES_DIR
from tuner.problem.spec import config_from_sets, load_problem

ORT_ONLY = """\
parameters:
  precision: {type: categorical, choices: [fp32, int8-dynamic], default: fp32}
  dyn_per_channel: {type: bool, default: false, when: {precision: [int8-dynamic]}}
"""


def test_notes_say_what_a_study_cannot_know(demo_path, tmp_path):
    ort_only = os.path.join(SPACES_DIR, "onnxruntime-cpu.yaml")  # cpu.yaml adds notes on what this CPU drops
    bare = load_problem(demo_path, ort_only, shapes=["x=2x64x256"])
    assert len(bare.notes) == 2
    assert bare.notes[0].startswith("no --require: every trial counts as feasible")
    assert "synthetic inputs (x: standard normal)" in bare.notes[1] and "says little about a real task" in bare.notes[1]
    np.savez(tmp_path / "val.npz", x=np.zeros((1, 2, 64, 256), np.float32))
    assert load_problem(demo_path, ort_only, data=str(tmp_path / "val.npz"), require="cos<=0.01").notes == []


def test_a_set_value_whose_condition_does_not_hold_is_refused(demo_path, tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(ORT_ONLY)
    problem = load_problem(demo_path, str(space), shapes=["x=2x64x256"], n_batches=1)
    with pytest.raises(UserError, match=r"--set dyn_per_channel: inactive here, it applies when \{'precision'"):
        config_from_sets(problem, ["dyn_per_channel=true"])
    assert config_from_sets(problem, ["precision=int8-dynamic", "dyn_per_channel=true"]) == {
        "precision": "int8-dynamic", "dyn_per_channel": True}


def test_conditional_params_dropped_and_keys_stable(demo_path):
    problem = load_problem(demo_path, os.path.join(SPACES_DIR, "onnxruntime-cpu.yaml"), shapes=["x=2x64x256"],
                           require="cos<=0.005", n_batches=1)
    fp32 = config_from_sets(problem, ["precision=fp32"])
    assert "dyn_per_channel" not in fp32 and "keep_float" not in fp32
    dyn = config_from_sets(problem, ["precision=int8-dynamic"])
    assert "dyn_per_channel" in dyn and "calibration_method" not in dyn
    with pytest.raises(UserError, match="--set dyn_per_channel: inactive here"):  # refused, not dropped silently
        config_from_sets(problem, ["precision=fp32", "dyn_per_channel=true"])
    assert config_key(fp32) == config_key(config_from_sets(problem, ["precision=fp32"]))
    assert config_key(fp32) != config_key(dyn)
