"""A trial's user attributes in one transaction (tuner.search.attrs), against Optuna's own per-key writes."""
import optuna

from tuner.search.attrs import set_user_attrs
from tuner.storage import open_storage

ATTRS = {"latency": {"median_ms": 1.5}, "metrics": {"cos": 0.001}, "config": {"precision": "int8"}, "n": 3}


def test_the_attributes_written_at_once_read_back_as_optuna_wrote_them(tmp_path):
    for url in (f"sqlite:///{tmp_path}/s.db", f"journal:///{tmp_path}/s.log", None):
        study = optuna.create_study(storage=open_storage(url) if url else None)

        def objective(trial):
            set_user_attrs(trial, ATTRS)
            assert trial.user_attrs == ATTRS  # the running trial sees them too
            trial.set_user_attr("n", 4)  # and a later per-key write wins, as in Optuna
            return 1.0

        study.optimize(objective, n_trials=2)
        assert [t.user_attrs for t in study.trials] == [ATTRS | {"n": 4}] * 2, url


def test_one_transaction_for_many_attributes(tmp_path):
    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path}/s.db"))
    trial = study.ask()
    commits = []
    backend = study._storage._backend
    from sqlalchemy import event

    event.listen(backend.engine, "commit", lambda conn: commits.append(1))
    set_user_attrs(trial, {f"k{i}": i for i in range(10)})
    assert len(commits) == 1
    assert study.trials[0].user_attrs == {f"k{i}": i for i in range(10)}
