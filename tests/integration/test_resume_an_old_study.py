"""A study made before the typed study record (StudySettings, settings schema 2): made here by the code of
the last commit that stored the untyped settings (schema 1), taken from this repository's history, then
resumed, reported on and exported by this code."""
import os
import subprocess
import sys

import pytest

from tuner.inputs.space import SPACES_DIR
from tuner.run.options import TuneOptions
from tuner.run.tune import tune_study
from tuner.search.settings import SCHEMA, SETTINGS_ATTR
from tuner.store.storage import load_study

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCHEMA_1_COMMIT = "c6beb3e"  # the last commit whose studies store the untyped settings
SMALL = os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml")  # no per-layer analysis: seconds


def _old_tuner(tmp_path) -> str:
    """The package as it was at SCHEMA_1_COMMIT, unpacked into a folder to put on PYTHONPATH."""
    old = tmp_path / "old"
    old.mkdir()
    archive = subprocess.run(["git", "-C", REPO, "archive", SCHEMA_1_COMMIT, "tuner"], capture_output=True)
    if archive.returncode != 0:
        pytest.fail(f"git archive {SCHEMA_1_COMMIT} failed (a shallow clone?): {archive.stderr.decode()[:300]}")
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
    return str(old)


def test_a_study_made_before_the_typed_settings_resumes_reports_and_exports(tmp_path, demo_path):
    url = f"sqlite:///{tmp_path}/old.db"
    env = os.environ | {"PYTHONPATH": _old_tuner(tmp_path)}
    # the old code's own entry point: its flat layout had tuner/cli.py
    made = subprocess.run([sys.executable, "-m", "tuner.cli", "tune", demo_path, "--study", "old", "--storage", url,
                           "--shape", "x=2x64x256", "--require", "cos<=0.005", "--space", SMALL, "--n-trials", "2",
                           "--no-select", "--quiet"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr[-2000:]
    stored = load_study("old", url, reading=True).user_attrs[SETTINGS_ATTR]
    assert "schema" not in stored and "spec" in stored  # schema 1, as the old code wrote it

    result = tune_study(TuneOptions.of(study="old", storage=url, n_trials=2, quiet=True, progress=False))
    assert result.trials_run == 2 and result.winner is not None
    study = load_study("old", url, reading=True)
    assert len(study.trials) == 4 and study.user_attrs[SETTINGS_ATTR]["schema"] == SCHEMA
    assert study.user_attrs[SETTINGS_ATTR]["require"] == "cos<=0.005"

    for argv in (["status", "--study", "old", "--storage", url],
                 ["report", "--study", "old", "--storage", url, "--out", str(tmp_path / "r.html")],
                 ["export", "--study", "old", "--storage", url, "--out", str(tmp_path / "engine")]):
        r = subprocess.run([sys.executable, "-m", "tuner.cli.main", *argv], cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 0, (argv[0], r.stderr[-2000:])
    assert os.path.isfile(tmp_path / "r.html") and os.path.isfile(tmp_path / "engine" / "config.json")
