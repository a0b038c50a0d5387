"""`tuner delete` and the disk use in `tuner studies` (issue 43): real studies of the demo model in real SQLite
files under studies/, with their engines, trials log, artifacts and lock files."""
import os

import optuna
import pytest
from cli_run import run_cli

from tuner.inputs.space import SPACES_DIR
from tuner.run.tune import study_run_lock

SMALL = os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml")


def _tune(demo_path, capsys, study: str, storage: str | None = None):
    args = ["tune", demo_path, "--study", study, "--space", SMALL, "--shape", "x=2x64x256", "--n-trials", "2",
            "--max-timing-s", "0.3", "--quiet", "--top-k", "1", "--keep-engines"]
    code, out, err = run_cli(args + (["--storage", storage] if storage else []), capsys)
    assert code == 0, err[-2000:]


def _files(root) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs} | \
        {os.path.relpath(os.path.join(d, x), root) + "/" for d, xs, _ in os.walk(root) for x in xs}


@pytest.fixture
def tuned(tmp_path, monkeypatch, demo_path, capsys):
    monkeypatch.chdir(tmp_path)
    _tune(demo_path, capsys, "s")
    made = _files(tmp_path)
    assert {"studies/s.db", "studies/s-trials.log", "studies/s-engines/", "studies/s-artifacts/"} <= made, made
    return tmp_path


def test_delete_removes_the_study_and_every_file_it_made(tuned, capsys):
    code, out, err = run_cli(["studies"], capsys)
    assert code == 0 and " MB on disk" in out.splitlines()[0], out
    code, out, err = run_cli(["delete", "--study", "s", "--yes"], capsys)
    assert code == 0, err
    listed = out.splitlines()
    assert listed[0] == "deleting study s removes:" and listed[-1] == "deleted study s"
    for what in ("study s (2 trials)", "trial engines: studies/s-engines", "trials log: studies/s-trials.log",
                 "engine artifacts: ", "lock file: studies/s.db.s.lock", "study file (no other study in it): studies/s.db"):
        assert any(what in line for line in listed), (what, listed)
    assert _files(tuned) == {"studies/"}  # nothing of the study is left, its folder aside


def test_without_yes_and_no_terminal_nothing_is_deleted(tuned, capsys):
    before = _files(tuned)
    code, out, err = run_cli(["delete", "--study", "s"], capsys)  # pytest's stdin is no terminal
    assert code == 2 and "nothing deleted" in err and "--yes" in err and "Traceback" not in err
    assert _files(tuned) == before


def test_a_file_with_another_study_keeps_it_and_a_running_study_is_refused(tuned, demo_path, capsys):
    _tune(demo_path, capsys, "t", "sqlite:///studies/s.db")
    with study_run_lock("sqlite:///studies/s.db", "t") as alone:
        assert alone
        code, out, err = run_cli(["delete", "--study", "t", "--storage", "sqlite:///studies/s.db", "--yes"], capsys)
        assert code == 2 and "is being tuned" in err
    code, out, err = run_cli(["delete", "--study", "s", "--yes"], capsys)
    assert code == 0 and "study file" not in out, out
    assert optuna.get_all_study_names("sqlite:///studies/s.db") == ["t"]
    left = _files(tuned)
    assert "studies/s.db" in left and not [f for f in left if f.startswith(("studies/s-", "studies/s.db.s."))], left


def test_deleting_a_study_that_is_not_there_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["delete", "--study", "nosuch", "--yes"], capsys)
    assert code == 2 and "no study 'nosuch'" in err and _files(tmp_path) == set()
