"""Whether a study's user metric may run here (tuner.search.settings.check_metrics): only one this command
line allows (--require or --allow-metric), and only from the file the study was made with."""
import importlib
import sys
import uuid

import pytest

from tuner.errors import UserError
from tuner.measure.metric_source import source_hash
from tuner.measure.requirement import Requirement
from tuner.problem.spec import ProblemSpec
from tuner.search.settings import StudySettings, allowed_metrics, check_metrics

METRIC = "def score(outputs, refs, inputs):\n    return 0.0\n"


@pytest.fixture
def metric(tmp_path, monkeypatch):
    """(spec, its file) of a metric module on sys.path."""
    name = f"trusted_{uuid.uuid4().hex[:8]}"
    path = tmp_path / f"{name}.py"
    path.write_text(METRIC)
    importlib.invalidate_caches()
    monkeypatch.syspath_prepend(str(tmp_path))
    yield f"{name}:score", path
    sys.modules.pop(name, None)


def settings_for(require: str, hashes: dict | None = None) -> StudySettings:
    """A stored study's settings as a worker reads them: the requirement parsed without looking at its metrics."""
    return StudySettings(ProblemSpec("/x/m.onnx", require=require), Requirement.parse(require, load_user_metrics=False),
                         "h", metric_hashes=hashes or {})


def test_a_stored_metric_runs_only_where_the_command_line_allows_it(metric):
    spec, path = metric
    stored = settings_for(f"cos<=0.01,{spec}<=1", {spec: source_hash(str(path))})
    with pytest.raises(UserError) as e:
        check_metrics("s", stored, allowed_metrics([]))
    msg = str(e.value)
    assert msg.startswith(f"study 's' names the user metric {spec}: code chosen by whoever writes the study's database")
    assert f"add --allow-metric {spec} if you trust" in msg and "docs/distributed.md#trust-model" in msg and "\n" not in msg
    with pytest.raises(UserError, match="add --allow-metric"):  # another metric allowed is not this one
        check_metrics("s", stored, allowed_metrics(["other_module:score"]))
    assert check_metrics("s", stored, allowed_metrics([spec])).metric_hashes == {spec: source_hash(str(path))}
    assert check_metrics("s", stored, None).metric_hashes == stored.metric_hashes  # a local worker of tune


def test_a_new_requirement_pins_its_metrics_files(metric):
    spec, path = metric
    given = Requirement.parse(f"{spec}<=1")  # the user's own --require allows its metrics
    new = check_metrics("s", settings_for(f"{spec}<=1"), allowed_metrics(None, given))
    assert new.metric_hashes == {spec: source_hash(str(path))} and len(new.metric_hashes[spec]) == 64
    assert new.to_attrs()["metric_hashes"] == new.metric_hashes  # stored with the study
    assert StudySettings.from_attrs(new.to_attrs(), load_user_metrics=False).metric_hashes == new.metric_hashes


def test_a_changed_metric_file_is_refused(metric):
    spec, path = metric
    stored = settings_for(f"{spec}<=1", {spec: source_hash(str(path))})
    path.write_text(METRIC + "# changed\n")
    with pytest.raises(UserError) as e:
        check_metrics("s", stored, [spec])
    msg = str(e.value)
    assert msg.startswith(f"metric {spec}: the file here differs from the one the study 's' was made with (sha256 ")
    assert msg.endswith(f"{path}; give this host the study's file")
    with pytest.raises(UserError, match="give the same file, or --force to go on with this one"):
        check_metrics("s", stored, [spec], forceable=True)
    assert check_metrics("s", stored, [spec], force=True).metric_hashes == {spec: source_hash(str(path))}
    with pytest.raises(UserError, match="the file here differs"):  # a local worker checks the file too
        check_metrics("s", stored, None)


def test_a_study_made_before_metric_hashes_needs_the_metric_allowed(metric):
    spec, path = metric
    old = settings_for(f"{spec}<=1")  # no metric_hashes stored
    with pytest.raises(UserError) as e:
        check_metrics("s", old, set())
    assert f"names the user metric {spec} and was made before studies stored a metric's source hash" in str(e.value)
    assert f"add --allow-metric {spec}" in str(e.value)
    assert check_metrics("s", old, {spec}).metric_hashes == {spec: source_hash(str(path))}  # pinned from now on


def test_an_allowed_metric_must_still_be_a_metric_here():
    stored = settings_for("os:system<=1", {"os:system": "0" * 64})  # what a database's writer could store
    with pytest.raises(UserError, match="not a function defined in os's source"):
        check_metrics("s", stored, {"os:system"})


def test_allow_metric_is_written_module_function():
    with pytest.raises(UserError, match="--allow-metric os: write MODULE:FUNCTION"):
        allowed_metrics(["os"])
    assert allowed_metrics(["a.b:c"], Requirement.parse("cos<=1")) == {"a.b:c"}


def test_built_in_metrics_need_nothing():
    assert check_metrics("s", settings_for("cos<=0.01,top1<=0.1"), set()).metric_hashes == {}
