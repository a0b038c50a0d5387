"""A user metric stored in a study is code that whoever writes the database chose: a process that joins or
resumes the study runs it only if its own command line allows it, from the file the study was made with
(docs/distributed.md, "Trust model"). A SQLite file stands in for the shared database: the checks are the
same on PostgreSQL."""
import hashlib
import os
import shutil
import subprocess
import sys

import optuna
import pytest
from optuna.trial import TrialState

from tuner.api import study_problem
from tuner.errors import UserError
from tuner.inputs.space import SPACES_DIR
from tuner.run.join import join_study
from tuner.run.options import TuneOptions
from tuner.run.prepare import open_study
from tuner.search.settings import SETTINGS_ATTR
from tuner.store.storage import load_study

SMALL = os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml")  # no per-layer ranking: open_study builds nothing
# A metric that says where it was imported (each import appends a line), then measures nothing.
METRIC = """\
import os
with open(os.environ["TUNER_TEST_IMPORTS"], "a") as f:
    f.write("imported\\n")


def score(outputs, refs, inputs):
    return 0.0
"""
SPEC = "trusty:score"


@pytest.fixture
def work(tmp_path, monkeypatch):
    (tmp_path / "trusty.py").write_text(METRIC)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("TUNER_TEST_IMPORTS", str(tmp_path / "imports.log"))
    yield tmp_path
    sys.modules.pop("trusty", None)


def _create(work, **extra):
    opts = TuneOptions.of(study="s", model=extra.pop("model"), storage=f"sqlite:///{work}/s.db", shapes=["x=2x64x256"],
                       space=SMALL, require=f"cos<=1,{SPEC}<=1", **extra)
    return open_study(opts)


def test_a_study_pins_its_metric_and_a_joining_worker_runs_it_only_when_allowed(work, demo_path):
    ctx = _create(work, model=demo_path)
    url = ctx.url
    digest = hashlib.sha256((work / "trusty.py").read_bytes()).hexdigest()
    assert ctx.study.user_attrs[SETTINGS_ATTR]["metric_hashes"] == {SPEC: digest}
    with pytest.raises(UserError, match=f"study 's' names the user metric {SPEC}: code chosen by whoever writes"):
        join_study(url, "s", allow_metrics=())
    joined, _ = join_study(url, "s", allow_metrics=[SPEC])
    assert joined.problem.requirement.user_metrics() == [SPEC]
    join_study(url, "s")  # a local worker of `tuner tune --jobs`: its parent allowed the metric
    # select, export and verify load the stored problem the same way
    with pytest.raises(UserError, match=f"add --allow-metric {SPEC}"):
        study_problem(load_study("s", url))
    assert study_problem(load_study("s", url), [SPEC]).requirement.user_metrics() == [SPEC]
    # resuming without the metric on the command line: refused; with it (--allow-metric or --require): resumed
    with pytest.raises(UserError, match=f"add --allow-metric {SPEC}"):
        open_study(TuneOptions.of(study="s", storage=url))
    assert open_study(TuneOptions.of(study="s", storage=url, allow_metrics=[SPEC])).settings.metric_hashes == {SPEC: digest}
    assert not (work / "imports.log").exists()  # nothing above imported the metric: it runs in a trial only


def test_a_changed_metric_file_or_a_rewritten_requirement_is_refused(work, demo_path):
    url = _create(work, model=demo_path).url
    (work / "trusty.py").write_text(METRIC + "# another version\n")
    with pytest.raises(UserError, match=f"metric {SPEC}: the file here differs from the one the study 's' was made with"):
        join_study(url, "s", allow_metrics=[SPEC])
    with pytest.raises(UserError, match="or --force to go on with this one"):
        open_study(TuneOptions.of(study="s", storage=url, allow_metrics=[SPEC]))
    (work / "trusty.py").write_text(METRIC)
    # whoever writes the database names other code, with the hash of that code's file: allowed nowhere
    study = optuna.load_study(study_name="s", storage=url)
    attrs = study.user_attrs[SETTINGS_ATTR]
    rmtree = hashlib.sha256(open(shutil.__file__, "rb").read()).hexdigest()
    study.set_user_attr(SETTINGS_ATTR, attrs | {"require": "shutil:rmtree<=1", "metric_hashes": {"shutil:rmtree": rmtree}})
    with pytest.raises(UserError, match="names the user metric shutil:rmtree: code chosen by whoever writes"):
        join_study(url, "s", allow_metrics=[SPEC])


def _tuner(work, *args):
    env = dict(os.environ, PYTHONPATH=str(work), TUNER_TEST_IMPORTS=str(work / "imports.log"))
    return subprocess.run([sys.executable, "-m", "tuner.cli.main", *args], cwd=work, env=env, capture_output=True, text=True,
                          timeout=300)


def test_tuner_worker_refuses_a_stored_metric_without_allow_metric_and_runs_it_with(work, demo_path):
    db = f"sqlite:///{work}/w.db"
    r = _tuner(work, "tune", demo_path, "--study", "w", "--storage", db, "--space", SMALL, "--shape", "x=2x64x256",
               "--require", f"cos<=1,{SPEC}<=1", "--max-timing-s", "0.3", "--quiet", "--seed", "0", "--n-trials", "1",
               "--max-trials", "2", "--no-select")
    assert r.returncode == 0, r.stderr
    os.remove(work / "imports.log")  # the tuner's trial computed the metric
    r = _tuner(work, "worker", "--study", "w", "--storage", db, "--quiet", "--max-timing-s", "0.3")
    assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
    assert r.stderr.strip().splitlines() == [r.stderr.strip()]  # one line
    assert f"names the user metric {SPEC}" in r.stderr and f"add --allow-metric {SPEC}" in r.stderr
    assert not (work / "imports.log").exists()  # refused before anything imported it
    r = _tuner(work, "worker", "--study", "w", "--storage", db, "--quiet", "--max-timing-s", "0.3",
               "--allow-metric", SPEC)
    assert r.returncode == 0 and "1 trials run" in r.stdout, r.stdout + r.stderr
    assert (work / "imports.log").exists()
    trials = load_study("w", db, reading=True).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.COMPLETE]
    assert trials[1].user_attrs["metrics"][SPEC] == 0.0
