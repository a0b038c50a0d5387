"""A trial's record in one transaction (tuner.search.attrs), against Optuna's own per-key writes."""
import optuna
import pytest
from sqlalchemy import event

from tuner.search.attrs import write_trial
from tuner.store.storage import open_storage

ATTRS = {"latency": {"median_ms": 1.5}, "metrics": {"cos": 0.001}, "config": {"precision": "int8"}, "n": 3}
BOUNDS = {"cos<=0.005": -0.004, "build": 1.0}


def storages(tmp_path):
    return [open_storage(f"sqlite:///{tmp_path}/s.db"), open_storage(f"journal:///{tmp_path}/s.log"), None]


def test_the_record_written_at_once_reads_back_as_optuna_wrote_it(tmp_path):
    for storage in storages(tmp_path):
        study = optuna.create_study(storage=storage)

        def objective(trial):
            write_trial(trial, ATTRS, BOUNDS)
            assert trial.user_attrs == ATTRS  # the running trial sees them too
            assert trial.constraints == BOUNDS
            trial.set_user_attr("n", 4)  # and a later per-key write wins, as in Optuna
            return 1.0

        study.optimize(objective, n_trials=2)
        assert [t.user_attrs for t in study.trials] == [ATTRS | {"n": 4}] * 2, storage
        assert [t.constraints for t in study.trials] == [BOUNDS] * 2, storage

        reference = optuna.create_study()  # Optuna's own calls: the same stored form
        trial = reference.ask()
        for bound, value in BOUNDS.items():
            trial.set_constraint(bound, value)
        reference.tell(trial, 1.0)
        assert study.trials[0].system_attrs.items() >= reference.trials[0].system_attrs.items()


def test_one_transaction_for_the_whole_record(tmp_path):
    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path}/s.db"))
    trial = study.ask()
    commits = []
    event.listen(study._storage._backend.engine, "commit", lambda conn: commits.append(1))
    write_trial(trial, {f"k{i}": i for i in range(10)}, BOUNDS)
    assert len(commits) == 1
    assert study.trials[0].user_attrs == {f"k{i}": i for i in range(10)}
    assert study.trials[0].constraints == BOUNDS


def test_a_nan_constraint_is_refused_before_anything_is_written(tmp_path):
    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path}/s.db"))
    trial = study.ask()
    try:
        write_trial(trial, ATTRS, {"cos<=0.005": float("nan")})
    except ValueError as exc:
        assert "NaN" in str(exc)
    else:
        raise AssertionError("a NaN constraint was accepted")
    assert study.trials[0].user_attrs == {}


def test_a_second_record_overwrites_keys_and_a_finished_trial_refuses_one_as_optuna_does(tmp_path):
    for storage in storages(tmp_path):
        study = optuna.create_study(storage=storage)
        trial = study.ask()
        write_trial(trial, ATTRS)
        write_trial(trial, {"n": 5, "extra": [1, 2]}, {"cos<=0.005": 0.5})
        study.tell(trial, 1.0)
        assert study.trials[0].user_attrs == ATTRS | {"n": 5, "extra": [1, 2]}, storage
        assert study.trials[0].constraints == {"cos<=0.005": 0.5}
        with pytest.raises(Exception) as ours:
            write_trial(trial, ATTRS)
        with pytest.raises(Exception) as optunas:
            trial.set_user_attr("n", 6)
        assert type(ours.value) is type(optunas.value), storage
