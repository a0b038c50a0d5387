"""The study behind a run (search.study): which study of a storage is opened, its settings read, the names its
objectives get, what it records of its sampler; the samplers' limits and seeds (search.samplers, seeding); the
canonical forms plans compare by (search.plans)."""
import os
from dataclasses import replace
from types import SimpleNamespace

import optuna
import pytest
from optuna.trial import TrialState, create_trial

from tuner.errors import UserError
from tuner.inputs.space import SPACES_DIR, Param, load_space
from tuner.search import samplers
from tuner.search.choices import Timing
from tuner.search.plans import canon, plan_key
from tuner.search.seeding import new_seed
from tuner.search.settings import SETTINGS_ATTR, StudySettings
from tuner.search.study import create_or_resume, load_existing, stored_settings
from tuner.search.trials import completed

SMALL = os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml")


def test_completed_reads_only_the_complete_trials_of_a_study():
    study = optuna.create_study()
    study.add_trial(create_trial(value=1.0))
    study.add_trial(create_trial(state=TrialState.FAIL))
    study.ask()  # running
    assert [t.number for t in completed(study)] == [0]
    assert [t.number for t in completed(study.trials)] == [0]


def test_the_named_study_of_a_storage_is_opened_and_a_missing_one_is_none(tmp_path):
    url = f"sqlite:///{tmp_path}/two.db"
    optuna.create_study(study_name="a", storage=url)
    optuna.create_study(study_name="b", storage=url)
    assert load_existing("b", url).study_name == "b"
    assert load_existing("c", url) is None


def test_settings_are_read_only_from_a_study_engine_tuner_made():
    assert stored_settings(None) is None
    assert stored_settings(optuna.create_study()) is None
    made = optuna.create_study()
    made.set_user_attr(SETTINGS_ATTR, {"sampler": "random", "seed": 4, "require": "cos<=0.01"})
    assert stored_settings(made).seed == 4


def test_a_stored_user_metric_is_imported_unless_a_report_reads_it():
    attrs = {"sampler": "tpe", "require": "no_such_module_of_engine_tuner:metric<=1"}
    with pytest.raises(UserError, match="no_such_module_of_engine_tuner"):
        StudySettings.from_attrs(attrs)
    study = optuna.create_study()
    study.set_user_attr(SETTINGS_ATTR, attrs)
    with pytest.raises(UserError, match="no_such_module_of_engine_tuner"):
        stored_settings(study)
    assert str(stored_settings(study, load_user_metrics=False).requirement) == "no_such_module_of_engine_tuner:metric<=1"


@pytest.mark.parametrize("timing, names", [(Timing.PAIRED, ["latency_relative_to_baseline", "error"]),
                                           (Timing.ALONE, ["latency_ms", "error"]), (None, ["latency_ms", "error"])])
def test_a_new_study_names_its_objectives_by_its_timing_and_records_its_sampler(tmp_path, timing, names):
    settings = replace(StudySettings.from_attrs({"sampler": "tpe", "seed": 2, "require": "cos<=0.01"}), timing=timing)
    problem = SimpleNamespace(space=load_space(SMALL))
    study, stored = create_or_resume("s", f"sqlite:///{tmp_path}/s.db", None, settings, problem)
    assert study.metric_names == names
    assert stored.sampler_options["class"] == "TPESampler" and stored.sampler_options["multivariate"] is True
    assert study.user_attrs[SETTINGS_ATTR]["sampler_options"] == stored.sampler_options


def test_a_grid_study_samples_the_grid_of_its_own_space(tmp_path):
    settings = StudySettings.from_attrs({"sampler": "grid", "seed": 2})
    space = load_space(SMALL)
    study, _ = create_or_resume("g", f"sqlite:///{tmp_path}/g.db", None, settings, SimpleNamespace(space=space))
    assert isinstance(study.sampler, optuna.samplers.GridSampler)
    assert samplers.checked_grid(space) == samplers.grid_space(space)


def test_a_grid_of_exactly_the_limit_is_allowed_and_one_point_more_is_refused(monkeypatch):
    space = load_space(SMALL)
    points = 1
    for values in samplers.grid_space(space).values():
        points *= len(values)
    monkeypatch.setattr(samplers, "GRID_MAX_POINTS", points)
    assert samplers.checked_grid(space)
    monkeypatch.setattr(samplers, "GRID_MAX_POINTS", points - 1)
    with pytest.raises(UserError, match=rf"^--sampler grid: this space's grid has {points:,} points"):
        samplers.checked_grid(space)


def test_a_drawn_seed_is_below_two_to_the_31_and_spans_that_range():
    seeds = [new_seed() for _ in range(200)]
    assert all(0 <= s < 2**31 for s in seeds)
    assert max(seeds) >= 2**24  # 200 draws all under 2**24 would happen once in 2**1400


def test_plans_compare_configs_whatever_their_key_order_and_number_type():
    assert plan_key({"b": 1, "a": 2}) == plan_key({"a": 2, "b": 1}) == '{"a":2,"b":1}'
    as_int = Param(name="n", type="int", default=1, low=1, high=8)
    as_float = Param(name="f", type="float", default=0.5, low=0.0, high=1.0)
    assert canon(as_int, 4.0) == 4 and type(canon(as_int, 4.0)) is int
    assert canon(as_float, 1) == 1.0 and type(canon(as_float, 1)) is float
    assert canon(as_int, True) is True and canon(as_float, False) is False  # a bool stays what it is
    assert canon(as_int, "auto") == "auto"
