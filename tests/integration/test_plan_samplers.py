"""The plan samplers (--sampler fast|full|mixed) on real Optuna studies: SQLite files under tmp_path with a
synthetic objective, several worker processes on one study, and one real tuner study on the demo model."""
from __future__ import annotations

import collections
import os
import subprocess
import sys
import time

import optuna
import pytest
from plan_spaces import HELPED, conditional_params, parallel_params, space_of, synthetic_objective

from tuner.cli.main import main
from tuner.inputs.configs import defaults_chooser, trial_params
from tuner.inputs.space import SPACES_DIR, load_space
from tuner.search.plan_samplers import (
    CONFIG_ATTR,
    INDEX_ATTR,
    KEY_ATTR,
    FastSampler,
    FullSampler,
    MixedSampler,
    make_plan_sampler,
)
from tuner.search.plans import activation, active_config, plan_key, plans_fast, plans_full
from tuner.search.samplers import make_sampler
from tuner.search.settings import StudySettings
from tuner.search.trials import best_feasible, latency_of

optuna.logging.set_verbosity(optuna.logging.WARNING)
DEFAULTS = {"keep_float/top_k": 3}


def run(tmp_path, sampler, enqueue: list[dict] | None = None, n_trials: int = 500) -> optuna.Study:
    """A study whose trial 0 is the enqueued baseline (as the tuner does), run until the sampler stops it."""
    study = optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db", sampler=sampler)
    space = space_of(conditional_params())
    study.enqueue_trial(trial_params(space, defaults_chooser(), []), user_attrs={"baseline": True})
    for params in enqueue or []:
        study.enqueue_trial(params)
    study.optimize(synthetic_objective(space), n_trials=n_trials)
    assert sampler.is_exhausted(study)
    return study


def configs(study: optuna.Study) -> list[dict]:
    return [t.user_attrs["config"] for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]


def test_full_covers_every_combination_once(tmp_path):
    params = conditional_params()
    sampler = FullSampler(params, defaults=DEFAULTS)
    study = run(tmp_path, sampler)
    got = [plan_key(c) for c in configs(study)]
    assert len(study.trials) == len(got) == len(plans_full(params)) == 54
    assert sorted(got) == sorted(plan_key(p) for p in plans_full(params))
    assert study.trials[0].system_attrs[INDEX_ATTR] == 0  # the enqueued baseline took plan 0


def test_fast_changes_one_knob_per_trial_relative_to_trial_0(tmp_path):
    params = conditional_params()
    sampler = FastSampler(params, defaults=DEFAULTS)
    a_z = {"a": "z"}  # a fast plan, enqueued partially: counts as that plan
    off_plan = {"a": "z", "d": "q"}  # two changes: runs as given, takes no plan
    study = run(tmp_path, sampler, enqueue=[a_z, off_plan])
    trials = study.trials
    assert len(trials) == len(plans_fast(params)) + 1
    assert trials[1].params == {"a": "z", "d": "p", "e": 0.5, "keep_float/n1": False, "keep_float/top_k": 3}
    assert trials[2].user_attrs["config"] == {"a": "z", "d": "q", "e": 0.5} and trials[2].system_attrs[INDEX_ATTR] is None
    base = trials[0].user_attrs["config"]
    assert base == plans_fast(params)[0]
    by_name = {p.name: p for p in params}
    seen = set()
    for t in trials[1:]:
        if t.number == 2:
            continue
        config = t.user_attrs["config"]
        knobs = [k for k in config if config[k] != base.get(k, by_name[k].default)]
        assert len(knobs) == 1 or set(knobs[:-1]) <= set(activation(by_name[knobs[-1]], params)), config
        assert config == active_config(params, {**activation(by_name[knobs[-1]], params), knobs[-1]: config[knobs[-1]]})
        seen.add(plan_key(config))
    assert seen | {plan_key(base)} == {plan_key(p) for p in plans_fast(params)}


def test_mixed_second_phase_is_the_product_over_the_knobs_that_helped(tmp_path):
    params = conditional_params()
    sampler = MixedSampler(params, defaults=DEFAULTS, poll_s=0.01)
    study = run(tmp_path, sampler)
    n_fast = len(plans_fast(params))
    got = [plan_key(c) for c in configs(study)]
    assert len(got) == len(set(got)) == len(study.trials)
    assert set(got[:n_fast]) == {plan_key(p) for p in plans_fast(params)}
    assert sampler.helped(study.trials) == HELPED
    fast_keys = {plan_key(p) for p in plans_fast(params)}
    product = {plan_key(p) for p in plans_full(params, HELPED)}
    assert set(got[n_fast:]) == product - fast_keys
    assert len(product) == 18 and len(got) == n_fast + len(product - fast_keys)


def test_mixed_with_nothing_helping_stops_after_fast(tmp_path):
    params = conditional_params()
    sampler = MixedSampler(params, defaults=DEFAULTS, margin=0.5, poll_s=0.01)
    study = run(tmp_path, sampler)
    assert len(study.trials) == len(plans_fast(params)) and sampler.helped(study.trials) == []


def test_a_run_past_exhaustion_is_pruned_not_rebuilt(tmp_path):
    params = conditional_params()
    sampler = FastSampler(params, defaults=DEFAULTS)
    study = run(tmp_path, sampler)
    trial = study.ask()
    with pytest.raises(optuna.TrialPruned):
        trial.suggest_categorical("a", ["x", "y", "z"])
    assert KEY_ATTR not in study._storage.get_trial_system_attrs(trial._trial_id)


def test_plan_values_must_fit_the_objective(tmp_path):
    params = conditional_params()
    study = optuna.create_study(storage=f"sqlite:///{tmp_path}/s.db", sampler=FastSampler(params))
    trial = study.ask()
    assert study._storage.get_trial_system_attrs(trial._trial_id)[CONFIG_ATTR] == plans_fast(params)[0]
    with pytest.raises(ValueError, match="disagree"):
        trial.suggest_categorical("a", ["only", "other"])


def test_mixed_waits_for_running_fast_trials(tmp_path):
    """ask/tell: once every fast plan is taken, a new trial waits (up to wait_s) for them to finish."""
    params = conditional_params()
    sampler = MixedSampler(params, defaults=DEFAULTS, poll_s=0.01, wait_s=0.2)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path}/s.db", sampler=sampler)
    open_trials = [study.ask() for _ in plans_fast(params)]
    assert not sampler.is_exhausted(study)
    late = study.ask()  # waited 0.2 s, then phase 2 from no finished trial: nothing helped
    assert study._storage.get_trial_system_attrs(late._trial_id).get("plan:none")
    for t in open_trials:
        study.tell(t, 10.0)
    assert sampler.is_exhausted(study)


def test_an_all_default_complete_trial_counts_as_the_baseline(tmp_path):
    """A baseline run before this sampler (another sampler, or added by hand) is not run again."""
    params = conditional_params()
    space = space_of(params)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path}/s.db", sampler=optuna.samplers.RandomSampler(seed=0))
    dists = {"a": optuna.distributions.CategoricalDistribution(["x", "y", "z"]),
             "d": optuna.distributions.CategoricalDistribution(["p", "q"]),
             "e": optuna.distributions.FloatDistribution(0.0, 1.0)}
    study.add_trial(optuna.trial.create_trial(params={"a": "x", "d": "p", "e": 0.5}, distributions=dists, value=10.0,
                                              user_attrs={"config": {"a": "x", "d": "p", "e": 0.5}}))
    study.sampler = FastSampler(params, defaults=DEFAULTS)
    study.optimize(synthetic_objective(space), n_trials=100)
    assert len(study.trials) == len(plans_fast(params))
    assert sorted(plan_key(c) for c in configs(study)) == sorted(plan_key(p) for p in plans_fast(params))


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_mixed_gives_way_to_a_queued_retry(tmp_path):
    """A fast trial fails and is queued again (RetryHeartbeatStaleTrialCallback copies its system
    attrs) while a new trial waits: the new trial is pruned, the retry keeps its plan."""
    import threading

    params = conditional_params()
    waiting_now = threading.Event()

    def sleep(seconds: float) -> None:  # the sampler waits for the running fast trial: now it may fail
        waiting_now.set()
        time.sleep(seconds)

    sampler = MixedSampler(params, defaults=DEFAULTS, poll_s=0.01, wait_s=60, sleep=sleep)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path}/s.db", sampler=sampler)
    trials = [study.ask() for _ in plans_fast(params)]
    for t in trials[:-1]:
        study.tell(t, 10.0)
    last = trials[-1]

    def fail_and_retry() -> None:
        assert waiting_now.wait(60)
        frozen = study.tell(last, state=optuna.trial.TrialState.FAIL)
        optuna.storages.RetryHeartbeatStaleTrialCallback()(study, study._storage.get_trial(frozen._trial_id))

    thread = threading.Thread(target=fail_and_retry)
    thread.start()
    waiting = study.ask()
    thread.join()
    assert study._storage.get_trial_system_attrs(waiting._trial_id).get("plan:none")
    study.tell(waiting, state=optuna.trial.TrialState.PRUNED)
    retry = study.ask()  # pops the queued retry: same plan, no new claim
    attrs = study._storage.get_trial_system_attrs(retry._trial_id)
    assert attrs[KEY_ATTR] == plan_key(plans_fast(params)[-1]) and attrs["failed_trial"] == last.number
    study.tell(retry, 10.0)
    assert sampler.is_exhausted(study)  # nothing helped (all 10.0): no second phase


@pytest.mark.parametrize("storage", ["inmemory", "journal"])
def test_other_storages(tmp_path, storage):
    """The samplers only use the BaseStorage API: in-memory and journal-file storages work too."""
    params = conditional_params()
    if storage == "journal":
        from optuna.storages.journal import JournalFileBackend
        store = optuna.storages.JournalStorage(JournalFileBackend(str(tmp_path / "s.log")))
    else:
        store = optuna.storages.InMemoryStorage()
    sampler = MixedSampler(params, defaults=DEFAULTS, poll_s=0.01)
    study = optuna.create_study(storage=store, sampler=sampler)
    study.optimize(synthetic_objective(space_of(params)), n_trials=500)
    got = [plan_key(c) for c in configs(study)]
    # 18 in the product, 8 of them fast plans
    assert len(got) == len(set(got)) == len(study.trials) == len(plans_fast(params)) + 10
    assert sampler.helped(study.trials) == HELPED


# ---------------------------------------------------------------- several processes on one SQLite study

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plan_worker.py")


@pytest.mark.parametrize("kind,strategy,workers", [("optuna", "fast", 2), ("tuner", "fast", 3), ("optuna", "full", 2),
                                                   ("tuner", "mixed", 2)])
def test_workers_never_take_the_same_plan(tmp_path, kind, strategy, workers):
    """Without the re-read after the claim (PlanSampler.before_trial) such runs took plans twice."""
    path = tmp_path / "p.db"
    params = parallel_params(strategy)
    plans = plans_full(params) if strategy == "full" else plans_fast(params)
    if strategy == "mixed":  # k0 and k1 helped: their product (25) minus the 9 fast plans in it
        plans += [p for p in plans_full(params, ["k0", "k1"]) if p not in plans]
    assert len(plans) == {"fast": 33, "full": 64, "mixed": 49}[strategy]
    study = optuna.create_study(study_name="p", storage=f"sqlite:///{path}",
                                sampler=make_plan_sampler(strategy, params, defaults=DEFAULTS))
    # trial 0: the baseline, enqueued and run before the workers start (as `tuner tune` does)
    study.enqueue_trial(trial_params(space_of(params), defaults_chooser(), []))
    study.optimize(synthetic_objective(space_of(params)), n_trials=1)
    barrier = tmp_path / "barrier"  # every worker waits there until all have joined the study
    barrier.mkdir()
    procs = [subprocess.Popen([sys.executable, WORKER, kind, str(path), strategy, str(barrier), str(workers), "0.005"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(workers)]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    trials = optuna.load_study(study_name="p", storage=f"sqlite:///{path}").trials
    keys = [t.system_attrs.get(KEY_ATTR) for t in trials if t.system_attrs.get(KEY_ATTR) is not None]
    assert [k for k, n in collections.Counter(keys).items() if n > 1] == []  # no plan twice
    assert set(keys) == {plan_key(p) for p in plans}  # every plan once
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(complete) == len(plans)
    extra = [t for t in trials if t.state != optuna.trial.TrialState.COMPLETE]
    assert all(t.state == optuna.trial.TrialState.PRUNED for t in extra)  # at most a late ask per worker
    assert len(extra) <= workers - 1
    by_worker = collections.Counter(t.user_attrs.get("pid", "parent") for t in complete)
    assert len(by_worker) == workers + 1  # every worker ran some


# ---------------------------------------------------------------- the tuner: --sampler fast|full|mixed

def test_make_sampler_by_name():
    space = load_space(os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml"))

    def settings(**attrs):
        return StudySettings.from_attrs(attrs)
    assert isinstance(make_sampler(settings(sampler="fast"), space), FastSampler)
    assert isinstance(make_sampler(settings(sampler="full"), space), FullSampler)
    mixed = make_sampler(settings(sampler="mixed", rankings={"keep_float": {"cut": 4}}), space)
    assert isinstance(mixed, MixedSampler) and mixed.default_for("keep_float/top_k") == 4
    assert isinstance(make_sampler(settings(sampler="tpe", seed=1), space), optuna.samplers.TPESampler)


def test_fast_and_tpe_studies_on_the_demo_model(demo_path, tmp_path, monkeypatch):
    """One real study with --sampler fast (its 6 plans, then it stops by itself although 10 trials were
    allowed) beside a TPE study of the same budget on the same storage: what a comparison reads."""
    monkeypatch.chdir(tmp_path)
    space = os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml")
    storage = f"sqlite:///{tmp_path}/cmp.db"
    common = ["--space", space, "--storage", storage, "--shape", "x=2x64x256", "--require", "cos<=0.005",
              "--max-timing-s", "1", "--no-select", "--quiet"]
    assert main(["tune", demo_path, "--study", "fast", "--sampler", "fast", "--n-trials", "10", *common]) == 0
    fast = optuna.load_study(study_name="fast", storage=storage)
    plans = plans_fast(load_space(space).params)
    assert len(fast.trials) == len(plans) == 6
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in fast.trials)
    configs = [t.user_attrs["config"] for t in fast.trials]
    assert sorted(plan_key(c) for c in configs) == sorted(plan_key(p) for p in plans)
    assert fast.trials[0].user_attrs["baseline"] and configs[0] == plans[0]
    for c in configs[1:]:  # one knob changed per trial
        assert sum(c[k] != plans[0][k] for k in c) == 1, c
    assert main(["tune", demo_path, "--study", "tpe", "--sampler", "tpe", "--seed", "0", "--n-trials", "6", *common]) == 0
    tpe = optuna.load_study(study_name="tpe", storage=storage)
    assert len(tpe.trials) == 6
    best = {s.study_name: best_feasible(s) for s in (fast, tpe)}
    assert all(b is not None and latency_of(b) > 0 for b in best.values())  # both comparable by their best
    assert fast.user_attrs["tuner_settings"]["sampler_options"]["class"] == "FastSampler"
