"""Opening a new study (tuner.run.prepare): its objectives' names and the notes it stores. Nothing is
built here (the small space has no per-layer ranking)."""
import os

import pytest

from tuner.inputs.space import SPACES_DIR
from tuner.run.options import TuneOptions
from tuner.run.prepare import open_study


@pytest.mark.parametrize("objectives, timing, names", [
    ("latency,error", "alone", ["latency_ms", "error"]), ("latency", "alone", ["latency_ms"]),
    ("latency,error", "paired", ["latency_relative_to_baseline", "error"])])
def test_a_new_study_names_its_objectives(objectives, timing, names, demo_path, tmp_path):
    small = os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml")  # no per-layer ranking: nothing is built here
    ctx = open_study(TuneOptions.of(study="s", model=demo_path, storage=f"sqlite:///{tmp_path}/s.db", shapes=["x=2x64x256"],
                                 objectives=objectives, timing=timing, space=small))
    assert ctx.study.metric_names == names
    assert list(ctx.settings.notes) == ctx.problem.notes and len(ctx.settings.notes) == 2


def test_a_study_another_process_creates_meanwhile_is_joined(demo_path, tmp_path, monkeypatch, capsys):
    """Two `tuner tune` started at once on one new study: both find no study, both prepare, and the second
    to create it joins the first's (as a resume of the same command) instead of dying on Optuna's
    DuplicatedStudyError. The other process is played by a full open_study between this one's look and
    its create, on the same SQLite file."""
    from tuner.run import prepare

    small = os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml")
    opts = TuneOptions.of(study="s", model=demo_path, storage=f"sqlite:///{tmp_path}/s.db", shapes=["x=2x64x256"],
                       space=small)
    real = prepare.create_or_resume
    others = []

    def another_process_first(name, storage, study, settings, problem, sampler_object=None):
        if not others:  # the first create of this process: the other one wins the race
            monkeypatch.setattr(prepare, "create_or_resume", real)
            others.append(open_study(opts))
            monkeypatch.setattr(prepare, "create_or_resume", another_process_first)
        return real(name, storage, study, settings, problem, sampler_object)

    monkeypatch.setattr(prepare, "create_or_resume", another_process_first)
    ctx = open_study(opts)
    assert "created by another process a moment ago: joining it" in capsys.readouterr().err
    assert ctx.study._study_id == others[0].study._study_id
    assert ctx.settings.to_attrs() == others[0].settings.to_attrs()


def test_a_refused_input_removes_no_database_another_process_made(demo_path, tmp_path, monkeypatch):
    """A refusal removes the file this call created, unless another process made a study in it meanwhile."""
    import optuna

    from tuner.errors import UserError
    from tuner.run import prepare

    path = tmp_path / "s.db"
    small = os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml")
    other = TuneOptions.of(study="other", model=demo_path, storage=f"sqlite:///{path}", shapes=["x=2x64x256"], space=small)
    real = prepare._open_study

    def refused_after_another_made_a_study(opts, joined=False, defer_analysis=False):
        real(other)
        raise UserError("refused")

    monkeypatch.setattr(prepare, "_open_study", refused_after_another_made_a_study)
    with pytest.raises(UserError):
        open_study(TuneOptions.of(study="s", model=demo_path, storage=f"sqlite:///{path}"))
    assert optuna.load_study(study_name="other", storage=f"sqlite:///{path}") is not None

    def refused(opts, joined=False, defer_analysis=False):  # after the storage made the file, as a refused model is
        prepare.open_storage(opts.storage_url)
        assert os.path.exists(tmp_path / "new" / "s.db")
        raise UserError("refused")

    monkeypatch.setattr(prepare, "_open_study", refused)
    with pytest.raises(UserError):
        open_study(TuneOptions.of(study="s", model=demo_path, storage=f"sqlite:///{tmp_path}/new/s.db"))
    assert not os.path.exists(tmp_path / "new")
