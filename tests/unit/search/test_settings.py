"""A study's stored settings (tuner.search.settings): what a call gives in stored form, a new study's
defaults, how a resume merges what is given with what is stored, and the checks that the model, the
space file and the data are still the study's."""
import os
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tuner import __version__
from tuner.errors import UserError
from tuner.inputs.model import model_hash
from tuner.inputs.space import DEFAULT_SPACE, SPACES_DIR
from tuner.measure.requirement import Requirement
from tuner.run.options import TuneOptions
from tuner.search.choices import Objectives, Timing
from tuner.search.settings import (
    SCHEMA,
    StudySettings,
    check_data,
    check_inputs,
    file_hash,
    given_settings,
    merge_settings,
    new_settings,
    readable_settings,
)

SMALL = os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml")


def given_by_name(**names) -> dict:
    """given_settings of what a call gives by the user's names (`tuner tune`'s flags, tuner.tune's keywords)."""
    return given_settings(**TuneOptions.of("s", **names).given())


def write_model(path, scale: float = 1.0) -> str:
    """A one-node model (y = x * scale): models that differ in one weight differ in content."""
    w = numpy_helper.from_array(np.array([scale], np.float32), "w")
    graph = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_model(tmp_path / "m.onnx")
    shutil.copy(SMALL, tmp_path / "space.yaml")
    return tmp_path


@pytest.mark.parametrize("kwargs, message", [
    ({"objectives": "speed"}, "--objectives speed: use one of latency,error, latency"),
    ({"sampler": "bayes"}, "--sampler bayes: use one of tpe, nsga2, gp, random, grid, fast, full, mixed"),
    ({"timing": "sometimes"}, "--timing sometimes: use one of paired, alone"),
    ({"model": "nope.onnx"}, "nope.onnx: no such model file; pass the path of an .onnx file"),
    ({"require": "cos<0.1"}, "requirement 'cos<0.1' does not parse"),
])
def test_given_settings_refuse_what_means_nothing(kwargs, message, work):
    with pytest.raises(UserError) as e:
        given_by_name(**kwargs)
    assert str(e.value).startswith(message), str(e.value)


def test_given_settings_are_stored_normalised_with_absolute_paths(work):
    given = given_by_name(model="m.onnx", space="space.yaml", data="val.npz", calib_data="cal.npz",
                           shapes=["x=1"], int_ranges=["ids=0:9"], require="cos <= 0.0050 and rel_l2<=1e-2",
                           objectives="latency", sampler="fast", seed=0, timing="alone")
    assert given == {"model_path": str(work / "m.onnx"), "model_hash": model_hash(str(work / "m.onnx")),
                     "space_path": str(work / "space.yaml"), "data": str(work / "val.npz"),
                     "calib_data": str(work / "cal.npz"), "shapes": ["x=1"], "int_ranges": ["ids=0:9"],
                     "requirement": Requirement.parse("cos<=0.005,rel_l2<=0.01"), "objectives": Objectives.LATENCY,
                     "sampler": "fast", "seed": 0, "timing": Timing.ALONE}
    assert given_by_name(ref_outputs="ref.npz") == {"ref_outputs": str(work / "ref.npz")}
    assert given_by_name() == {}  # nothing given: nothing to merge
    assert given_by_name(seed=None, shapes=[], require="") == {}


def test_a_new_study_needs_the_model_and_takes_the_defaults(work):
    with pytest.raises(UserError, match=r"^a new study needs the model: tuner tune MODEL.onnx --study NAME$"):
        new_settings(given_by_name(require="cos<=0.005"))
    settings = new_settings(given_by_name(model="m.onnx"))
    assert {k: settings.to_attrs()[k] for k in ("space_path", "data", "calib_data", "shapes", "int_ranges", "require",
                                                "objectives", "sampler", "seed", "created_with", "timing")} == {
        "space_path": DEFAULT_SPACE, "data": None, "calib_data": None, "shapes": None, "int_ranges": None,
        "require": "", "objectives": "latency,error", "sampler": "tpe", "seed": None, "created_with": __version__,
        "timing": None}  # decided by the study's backends once the problem has loaded (run/prepare.py)
    assert settings.space_hash == file_hash(DEFAULT_SPACE) and settings.requirement == Requirement(())
    assert settings.model_hash == model_hash(str(work / "m.onnx")) and settings.spec.require == ""
    assert settings.created_at > 0
    mine = new_settings(given_by_name(model="m.onnx", space="space.yaml", sampler="random", require="cos<=0.01"))
    assert mine.space_path == str(work / "space.yaml") and mine.space_hash == file_hash("space.yaml")
    assert mine.sampler == "random" and mine.spec.require == "cos<=0.01"  # the text child processes load
    assert mine.spec.model_path == str(work / "m.onnx") and mine.spec.space_path == str(work / "space.yaml")


def _stored(work) -> StudySettings:
    return new_settings(given_by_name(model="m.onnx", space="space.yaml", require="cos<=0.005", seed=1))


def test_a_resume_keeps_what_is_stored_and_refuses_a_different_setting_without_force(work):
    stored = _stored(work)
    assert merge_settings("s", stored, {}, force=False) == stored
    assert merge_settings("s", stored, given_by_name(require="cos<=0.005", seed=1), force=False) == stored
    with pytest.raises(UserError) as e:
        merge_settings("s", stored, given_by_name(require="cos<=0.01"), force=False)
    assert str(e.value) == ("study 's' was created with require='cos<=0.005', not 'cos<=0.01'; use another --study "
                            "name, or --force to change the study's settings")
    with pytest.raises(UserError, match="created with seed=1, not 2"):
        merge_settings("s", stored, given_by_name(seed=2), force=False)


def test_force_changes_a_setting_and_a_new_space_file_is_hashed_again(work):
    stored = _stored(work)
    merged = merge_settings("s", stored, given_by_name(require="cos<=0.01", sampler="random"), force=True)
    assert merged.to_attrs() == stored.to_attrs() | {"require": "cos<=0.01", "sampler": "random"}
    assert str(stored.requirement) == "cos<=0.005"  # frozen: the stored settings are not changed in place
    (work / "other.yaml").write_text(open(SMALL).read() + "# another space\n")
    merged = merge_settings("s", stored, given_by_name(space="other.yaml"), force=True)
    assert merged.space_path == str(work / "other.yaml")
    assert merged.space_hash == file_hash("other.yaml") != stored.space_hash


def test_another_model_is_refused_even_with_force(work):
    stored = _stored(work)
    other = write_model(work / "other.onnx", scale=2.0)
    for force in (False, True):
        with pytest.raises(UserError) as e:
            merge_settings("s", stored, given_by_name(model=other), force=force)
        msg = str(e.value)
        assert msg.startswith(f"study 's' was made for another model ({work / 'm.onnx'}, model_hash "
                              f"{stored.model_hash}; this one is {model_hash(other)})")
        assert msg.endswith("so --force cannot change it: use a new --study name")


def test_the_same_model_moved_elsewhere_is_accepted_and_the_stored_path_kept(work):
    stored = _stored(work)
    (work / "moved").mkdir()
    shutil.copy(work / "m.onnx", work / "moved" / "renamed.onnx")
    merged = merge_settings("s", stored, given_by_name(model="moved/renamed.onnx"), force=False)
    assert merged == stored  # the model's path is not a setting that differs


def test_check_inputs_refuses_a_changed_space_without_force_and_a_changed_model_always(work):
    stored = _stored(work)
    check_inputs("s", stored)  # unchanged: no refusal
    with open("space.yaml", "a") as f:
        f.write("# edited\n")
    with pytest.raises(UserError) as e:
        check_inputs("s", stored)
    assert str(e.value) == (f"study 's': {work / 'space.yaml'} changed since the study began (space_hash differs); "
                            "use a new --study name, or --force to continue with the new file")
    check_inputs("s", stored, force=True)
    write_model(work / "m.onnx", scale=3.0)
    for force in (False, True):
        with pytest.raises(UserError) as e:
            check_inputs("s", stored, force=force)
        assert str(e.value) == (f"study 's': {work / 'm.onnx'} changed since the study began (model_hash differs); "
                                "use a new --study name (--force cannot change a study's model)")


def test_check_inputs_says_which_file_is_missing(work):
    stored = _stored(work)
    os.remove("space.yaml")
    with pytest.raises(UserError) as e:
        check_inputs("s", stored, force=True)
    assert str(e.value) == (f"study 's': {work / 'space.yaml'} is missing; pass the file again "
                            "(tuner tune FILE --study s)")
    os.remove("m.onnx")
    with pytest.raises(UserError, match=r"m\.onnx is missing"):
        check_inputs("s", stored, force=True)


def test_check_data_refuses_other_data_whatever_the_force():
    blank = StudySettings.from_attrs({})
    check_data("s", blank, "abc")  # a study made before data hashes were stored
    check_data("s", StudySettings.from_attrs({"data_hash": "abc"}), "abc")
    with pytest.raises(UserError) as e:
        check_data("s", StudySettings.from_attrs({"data_hash": "abc"}), "def")
    assert str(e.value).startswith("study 's': the validation data here differ from the study's (data hash def, "
                                   "the study has abc)")


def test_a_space_file_s_hash_is_the_first_16_hex_of_its_sha256(work):
    import hashlib

    digest = hashlib.sha256((work / "space.yaml").read_bytes()).hexdigest()
    assert file_hash(str(work / "space.yaml")) == digest[:16]  # stored: studies made before compare with it


def test_the_timing_of_a_study_never_changes(work):
    stored = merge_settings("s", _stored(work), given_by_name(timing="paired"), force=True)
    for force in (False, True):
        with pytest.raises(UserError, match="times its candidates paired, not alone.*--force cannot change it"):
            merge_settings("s", stored, given_by_name(timing="alone"), force=force)


def test_settings_round_trip_through_the_stored_form(work):
    settings = merge_settings("s", _stored(work), given_by_name(timing="paired", objectives="latency"), force=True)
    attrs = settings.to_attrs()
    assert attrs["schema"] == SCHEMA and "spec" not in attrs  # one copy of the problem spec, flat
    assert attrs["require"] == "cos<=0.005" and attrs["timing"] == "paired" and attrs["objectives"] == "latency"
    assert StudySettings.from_attrs(attrs) == settings


# The settings a study made before StudySettings stored (schema 1): flat keys and a second copy of the spec.
SCHEMA_1 = {"space_path": "/x/space.yaml", "data": None, "calib_data": None, "shapes": ["x=1"], "int_ranges": None,
            "require": "cos<=0.005", "objectives": "latency,error", "sampler": "tpe", "seed": 3,
            "model_path": "/x/m.onnx", "model_hash": "abc", "space_hash": "def", "created_with": "0.1.0",
            "created_at": 1.0, "data_hash": "123", "backend": "onnxruntime", "machine": {"cpu": "x"},
            "spec": {"model_path": "/x/m.onnx", "space_path": "/x/space.yaml", "require": "cos<=0.005",
                     "n_batches": 4, "n_calib": 4}, "encoding": {}, "rankings": None, "notes": ["a note"],
            "sampler_options": {"class": "TPESampler"}}


def test_a_study_stored_before_the_typed_settings_reads_as_them():
    settings = StudySettings.from_attrs(SCHEMA_1)
    assert settings.spec.model_path == "/x/m.onnx" and settings.spec.shapes == ["x=1"] and settings.seed == 3
    assert str(settings.requirement) == "cos<=0.005" and settings.spec.require == "cos<=0.005"
    assert settings.timing == Timing.ALONE  # made before paired timing: no "timing" stored
    assert settings.notes == ("a note",) and settings.machine == {"cpu": "x"}
    with pytest.raises(UserError, match="newer engine-tuner"):
        StudySettings.from_attrs(SCHEMA_1 | {"schema": SCHEMA + 1})


def test_reports_read_any_study():
    assert readable_settings(None).requirement == Requirement(())  # a study engine-tuner did not make
    gone = readable_settings(SCHEMA_1 | {"require": "my_metrics:gone<=1"})  # a user metric no longer importable
    assert [b.metric for b in gone.requirement.bounds] == ["my_metrics:gone"]
    broken = readable_settings(SCHEMA_1 | {"require": "cos<"})
    assert broken.requirement == Requirement(()) and broken.seed == 3


def test_a_refused_setting_is_named_by_its_flag_and_its_stored_value_as_the_user_writes_it(work):
    stored = _stored(work)
    with pytest.raises(UserError, match=r"^study 's' was created with objectives='latency,error', not 'latency'; "):
        merge_settings("s", stored, given_by_name(objectives="latency"), force=False)
    with pytest.raises(UserError, match=r"^study 's' was created with require='cos<=0.005', not 'cos<=0.01'; "):
        merge_settings("s", stored, given_by_name(require="cos<=0.01"), force=False)


def test_require_given_several_times_is_one_requirement_of_all_bounds(work):
    got = given_by_name(require=["cos<=0.01", "rel_l2<=0.1"])["requirement"]
    assert got == Requirement.parse("cos<=0.01, rel_l2<=0.1") and len(got.bounds) == 2
