"""`tuner worker --keep-engines`: the worker builds through the same trial loop as `tuner tune`, so, as tune's
flag does, it keeps every trial's engine on this host's disk (tuner-engines/STUDY-HOST-PID/trial-N, its path in
the trial's engine_dir). A SQLite file stands in for the shared database: a worker runs the same code on it."""
import os
import subprocess
import sys

from optuna.trial import TrialState

from tuner.inputs.space import SPACES_DIR
from tuner.search.record import REUSED_FROM
from tuner.store.storage import load_study

SMALL = os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml")


def _tuner(work, *args):
    return subprocess.run([sys.executable, "-m", "tuner.cli.main", *args], cwd=work, capture_output=True, text=True,
                          timeout=300)


def _built(trials):
    """The trials a worker built and timed (not the baseline, not a copy of an earlier measurement)."""
    return [t for t in trials if t.number > 0 and t.state == TrialState.COMPLETE and REUSED_FROM not in t.user_attrs]


def test_a_worker_keeps_its_trials_engines_with_keep_engines_only(tmp_path, demo_path):
    db = f"sqlite:///{tmp_path}/k.db"
    r = _tuner(tmp_path, "tune", demo_path, "--study", "k", "--storage", db, "--space", SMALL, "--shape", "x=2x64x256",
               "--require", "cos<=0.005", "--max-timing-s", "0.3", "--quiet", "--seed", "0", "--n-trials", "1",
               "--max-trials", "10", "--no-select")
    assert r.returncode == 0, r.stderr
    r = _tuner(tmp_path, "worker", "--study", "k", "--storage", db, "--quiet", "--max-timing-s", "0.3",
               "--n-trials", "3", "--keep-engines")
    assert r.returncode == 0 and "3 trials run" in r.stdout, r.stdout + r.stderr
    kept = _built(load_study("k", db, reading=True).trials)
    assert kept, "the worker built no engine (every trial reused an earlier one)"
    root = os.path.realpath(tmp_path / "tuner-engines")
    for t in kept:
        folder = t.user_attrs.get("engine_dir")
        assert folder and os.path.realpath(folder).startswith(root + os.sep), folder
        assert os.path.basename(folder) == f"trial-{t.number}" and os.listdir(folder), folder
    before = {t.number for t in kept}
    r = _tuner(tmp_path, "worker", "--study", "k", "--storage", db, "--quiet", "--max-timing-s", "0.3",
               "--n-trials", "3")
    assert r.returncode == 0 and "3 trials run" in r.stdout, r.stdout + r.stderr
    for t in _built(load_study("k", db, reading=True).trials):
        if t.number not in before:  # without the flag: deleted once timed, as before
            assert t.user_attrs.get("engine_dir") is None, t.user_attrs.get("engine_dir")
            assert not [d for d, _, _ in os.walk(tmp_path / "tuner-engines") if d.endswith(f"trial-{t.number}")]
