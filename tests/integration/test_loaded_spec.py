"""A problem handed to a child as the parent loaded it (tuner.problem.spec.LoadedSpec, issue 38 item 2): the trial
child's job and a --jobs worker's join, run here with real builds and a real study, parse no requirement, hash no
model and check no space; given only the spec's fields, or the database, they do each once."""
import pickle
from collections import Counter
from dataclasses import asdict

import pytest
from test_tune_a_study import options

from tuner.execute import jobs
from tuner.measure.requirement import Requirement
from tuner.problem import spec as spec_mod
from tuner.problem.spec import config_from_sets, load_problem
from tuner.run import join as join_mod
from tuner.run.join import join_study
from tuner.run.tune import tune_study
from tuner.store import cache


@pytest.fixture
def counted(monkeypatch):
    """Counts of the calls a child should not make again: parsing the requirement, hashing the model, reading
    and checking the space."""
    counts: Counter = Counter()

    def counting(name, real):
        def call(*args, **kwargs):
            counts[name] += 1
            return real(*args, **kwargs)
        return call

    real_parse = Requirement.parse.__func__
    monkeypatch.setattr(Requirement, "parse", classmethod(lambda cls, *a, **k: counting("parse", real_parse)(cls, *a, **k)))
    for name in ("hash_model", "check_backends", "load_space"):
        monkeypatch.setattr(spec_mod, name, counting(name, getattr(spec_mod, name)))
    jobs._LOADED.clear()
    yield counts
    jobs._LOADED.clear()


def test_a_trial_childs_job_trusts_the_loaded_spec(demo_path, tmp_path, counted):
    problem = load_problem(demo_path, shapes=["x=2x64x256"], require="cos<=0.005")
    loaded = pickle.loads(pickle.dumps(problem.loaded))  # as the child receives it
    assert loaded == problem.loaded
    counted.clear()
    built = jobs.build_job(loaded, cache.cache_dir(), config_from_sets(problem, []), str(tmp_path / "a"))
    assert built.feasible and counted == Counter()
    # the spec's fields alone (a script's Evaluator): the child parses and checks them itself, once
    jobs._LOADED.clear()
    jobs.build_job(asdict(problem.spec), cache.cache_dir(), config_from_sets(problem, []), str(tmp_path / "b"))
    assert counted == Counter({"parse": 1, "check_backends": 1, "load_space": 1})  # the hash is the spec's


def test_a_local_worker_joins_with_the_parents_loaded_spec(demo_path, tmp_path, counted, monkeypatch):
    """What a --jobs worker does with the tuning process's LoadedSpec (run.local_workers._worker_main)."""
    counts_hash = Counter()
    real_hash = join_mod.model_hash
    monkeypatch.setattr(join_mod, "model_hash", lambda *a: counts_hash.update(["join hash"]) or real_hash(*a))
    opts = options(tmp_path, demo_path, n_trials=1, select=False)
    tune_study(opts)
    problem = load_problem(demo_path, shapes=["x=2x64x256"], require="cos<=0.005", space_path=opts.problem.space_path)
    counted.clear()
    ctx, _ = join_study(opts.storage_url, "s", worker=1, loaded=pickle.loads(pickle.dumps(problem.loaded)))
    assert counted == Counter() and counts_hash == Counter()
    assert ctx.problem.data_hash == problem.data_hash and str(ctx.settings.requirement) == "cos<=0.005"
    # joined from the database alone (`tuner worker`), the worker parses, hashes and checks for itself
    join_study(opts.storage_url, "s", worker=2)
    assert counted["parse"] == 1 and counted["check_backends"] == 1 and counts_hash["join hash"] == 1
