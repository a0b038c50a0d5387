"""The Python API takes Optuna's objects as Optuna's users pass them: a sampler object samples the study's
trials, a storage object names where the study lives; names and URLs still work (every other tune test)."""
import os

import optuna
import pytest

import tuner
from tuner.errors import UserError
from tuner.measure.latency import LatencyProtocol

FAST = LatencyProtocol(warmup=1, min_runs=3, max_runs=8, max_seconds=0.5)
SPACE = os.path.join(os.path.dirname(__file__), "..", "..", "search_spaces", "onnxruntime-cpu-small.yaml")


class RecordingSampler(optuna.samplers.RandomSampler):
    """Optuna's random sampler that notes the trials it drew a parameter for."""

    def __init__(self, seed):
        super().__init__(seed=seed)
        self.drew: set[int] = set()

    def sample_independent(self, study, trial, param_name, param_distribution):
        self.drew.add(trial.number)
        return super().sample_independent(study, trial, param_name, param_distribution)


def _opts(**kw):
    return dict(space=SPACE, shapes=["x=2x64x256"], require="cos<=0.005", protocol=FAST, progress=False, quiet=True,
                select=False) | kw


def test_tune_samples_with_the_sampler_object_into_the_storage_object(demo_path, tmp_path):
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/api.db")
    sampler = RecordingSampler(seed=3)
    result = tuner.tune(demo_path, study="api", storage=storage, sampler=sampler, **_opts(n_trials=4))
    trials = result.study.trials
    assert len(trials) == 4
    drawn = {t.number for t in trials if "fixed_params" not in t.system_attrs}  # not queued: the sampler's
    assert drawn and sampler.drew == drawn
    # the study is where the object points, and reads back through the object too
    assert os.path.isfile(tmp_path / "api.db")
    again = tuner.load_study("api", storage=storage)
    assert [t.number for t in again.trials] == [0, 1, 2, 3]
    settings = again.user_attrs["tuner_settings"]
    assert settings["sampler"] == f"object:{RecordingSampler.__module__}.RecordingSampler"
    assert settings["sampler_options"]["class"] == "RecordingSampler"

    # a resume gets the object again, and samples with it
    other = RecordingSampler(seed=4)
    tuner.tune(study="api", storage=f"sqlite:///{tmp_path}/api.db", sampler=other, **_opts(n_trials=1, space=None))
    assert other.drew == {4}


def test_a_study_made_with_a_sampler_object_needs_it_again(demo_path, tmp_path):
    url = f"sqlite:///{tmp_path}/api.db"
    tuner.tune(demo_path, study="api", storage=url, sampler=RecordingSampler(seed=0), **_opts(n_trials=1))
    with pytest.raises(UserError, match=r"^this study samples with a sampler object \(.*RecordingSampler\) given to "
                                        r"tuner\.tune: pass it again"):
        tuner.tune(study="api", storage=url, **_opts(n_trials=1, space=None))
    with pytest.raises(UserError, match=r"^study 'api' was created with sampler='object:.*RecordingSampler', not 'tpe'"):
        tuner.tune(study="api", storage=url, sampler="tpe", **_opts(n_trials=1, space=None))
    assert len(tuner.load_study("api", storage=url).trials) == 1


def test_workers_cannot_share_a_sampler_object_and_nothing_is_written(demo_path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=r"^jobs=2 with a sampler object: each worker process samples for itself"):
        tuner.tune(demo_path, study="api", sampler=RecordingSampler(seed=0), **_opts(n_trials=2, jobs=2))
    with pytest.raises(UserError, match=r"^storage=InMemoryStorage: "):
        tuner.tune(demo_path, study="api", storage=optuna.storages.InMemoryStorage(), **_opts(n_trials=2))
    assert os.listdir(tmp_path) == []
