"""Samplers seeded per trial (tuner.search.seeding): their random states, the slots of trials after lost ones,
NSGA-II's generations across a kill, one grid order for all workers, workers not in lockstep, and the seed a
study stores. The whole tuner path (Objective, real SIGKILL and Ctrl-C): tests/integration/test_exact_resume.py."""
from __future__ import annotations

import os
import warnings
from types import SimpleNamespace

import optuna
from needs import torch_or_skip
from optuna.trial import TrialState
from plan_spaces import EFFECTS, conditional_params, space_of

from tuner.inputs.configs import normalize, trial_chooser
from tuner.inputs.space import SPACES_DIR, load_space
from tuner.run.tune import recover_stale_trials
from tuner.search import seeding
from tuner.search.record import FAIL_REASON, RETRY_OF
from tuner.search.samplers import grid_space, make_sampler, sampler_options
from tuner.search.settings import StudySettings
from tuner.search.study import create_or_resume, load_existing, stored_settings
from tuner.store.storage import open_storage

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
SPACE = space_of(conditional_params())


class Killed(BaseException):
    """Ends the process's work in the middle of a trial as SIGKILL does: Optuna leaves the trial RUNNING."""


def objective(stop_at: int | None = None):
    """Two objectives over the tuner's suggestion code (normalize over a conditional space); a death
    (Killed) when the study has stop_at trials behind it."""

    def run(trial: optuna.Trial):
        config = normalize(SPACE, trial_chooser(trial), graph_nodes=[])
        behind = [t for t in trial.study.get_trials(deepcopy=False) if t.state.is_finished() and not seeding.is_lost(t)]
        if stop_at is not None and len(behind) >= stop_at:
            raise Killed
        latency = 10.0 + sum(EFFECTS.get((k, v), 0.0) for k, v in config.items()) + config["e"] ** 2
        return latency, (1.0 - config["e"]) * (2.0 if config["a"] == "y" else 1.0)

    return run


def run(url: str, sampler_of, n: int, stop_at: int | None = None) -> None:
    """One process: a new sampler on the stored study, stale trials retried (as `tuner tune` does), then
    trials up to n (lost ones not counted), or until Killed."""
    storage = open_storage(url)  # as the tuner opens it: WAL, synchronous=NORMAL
    try:
        study = optuna.load_study(study_name="s", storage=storage, sampler=sampler_of())
    except KeyError:
        study = optuna.create_study(study_name="s", storage=storage, sampler=sampler_of(), directions=["minimize"] * 2)
    recover_stale_trials(study)
    try:
        while sum(1 for t in study.get_trials(deepcopy=False) if not seeding.is_lost(t)) < n:
            study.optimize(objective(stop_at), n_trials=1)
    except Killed:
        pass


def kept(url: str) -> list[tuple]:
    trials = optuna.load_study(study_name="s", storage=url).trials
    return [(t.params, t.values, t.system_attrs.get("NSGAIISampler:generation")) for t in trials if not seeding.is_lost(t)]


def test_every_random_state_of_each_sampler_is_found():
    def paths(s):
        return set(seeding.random_states(s))
    assert paths(seeding.TPESampler(multivariate=True, group=True, seed=1)) == {"_rng", "_random_sampler._rng"}
    nsga2 = seeding.NSGAIISampler(seed=1)
    assert paths(nsga2) == {"_rng", "_random_sampler._rng"}
    assert nsga2._child_generation_strategy._rng is nsga2._rng  # shared: seeded once
    assert paths(seeding.RandomSampler(seed=1)) == {"_rng"}
    assert paths(seeding.GridSampler({"a": [1, 2]}, seed=1)) == {"_rng"}
    assert paths(seeding.GPSampler(seed=1)) == {"_rng", "_independent_sampler._rng"}


def test_the_trial_after_a_lost_one_takes_its_slot(tmp_path):
    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path}/s.db"))
    reasons = [None, "interrupted (Ctrl-C) during this trial", "build failed", None,
               "the tuning process died during this trial", "terminated (SIGTERM) during this trial", None,
               ""]  # 7: failed by a database server's heartbeat (no reason), retried by Optuna in trial 8
    for reason in reasons:
        trial = study.ask()
        if reason is None:
            study.tell(trial, 1.0)
        else:
            trial.set_user_attr(FAIL_REASON, reason)
            study.tell(trial, state=TrialState.FAIL)
    retry = study.ask()
    study._storage.set_trial_system_attr(retry._trial_id, "failed_trial", 7)  # RetryHeartbeatStaleTrialCallback's
    study.tell(retry, 1.0)
    study.tell(study.ask(), 1.0)
    trials = study.trials
    assert [seeding.is_lost(t) for t in trials] == [False, True, False, False, True, True, False, False, False, False]
    # a failed build counts (its config had its result); a stop, a death, a retried failure do not
    assert [seeding.trial_slot(study, t) for t in trials] == [0, 1, 1, 2, 3, 3, 3, 4, 4, 5]


def test_nsga2_generations_resume_exactly_across_kills(tmp_path):
    """A small population, so that the 30 trials go through five generations (crossover, mutation, the
    parent populations cached in the study): killed at 9 and 20 (the configs in flight retried), resumed
    with new samplers, it equals a run straight through, generation numbers included."""

    def sampler():
        return seeding.NSGAIISampler(seed=3, population_size=6)

    straight, stopped = f"sqlite:///{tmp_path}/straight.db", f"sqlite:///{tmp_path}/stopped.db"
    run(straight, sampler, 30)
    for stop_at in (9, 20):
        run(stopped, sampler, 30, stop_at)
    run(stopped, sampler, 30)
    trials = optuna.load_study(study_name="s", storage=stopped).trials
    retries = [t for t in trials if RETRY_OF in t.user_attrs]
    assert [t.user_attrs[RETRY_OF] for t in retries] == [9, 21] and all(t.state == TrialState.COMPLETE for t in retries)
    assert kept(stopped) == kept(straight)
    assert max(g for _, _, g in kept(straight)) >= 4


def test_reseeding_is_what_makes_the_resume_exact(tmp_path):
    """The same run with Optuna's own NSGAIISampler (one seed, states that advance) differs after the kill."""
    straight, stopped = f"sqlite:///{tmp_path}/straight.db", f"sqlite:///{tmp_path}/stopped.db"

    def sampler():
        return optuna.samplers.NSGAIISampler(seed=3, population_size=6)

    run(straight, sampler, 16)
    run(stopped, sampler, 16, stop_at=9)
    run(stopped, sampler, 16)
    got, want = kept(stopped), kept(straight)
    assert got[:9] == want[:9] and got != want


def test_grid_resumes_exactly_after_a_stop_and_a_kill(tmp_path):
    """Trials 0-2 enqueued, 3-5 take grid points 3-5 (Optuna's walk by number, here by slot), and 6-8 draw
    points 0-2 from those unvisited. Stopped (Ctrl-C) in trial 6 and killed in trial 8, the resumed study
    proposes what a straight run does: the stopped trial's point is not visited (Optuna's counts it: the
    next trial drew another), and the retry of the killed trial keeps its point. The killed trial held the
    last point to visit: failing it on resume does not ask the sampler (whose study.stop would raise)."""
    grid = {"x": [0, 1, 2], "y": [0, 1]}

    def process(url: str, stop_at: int | None = None, how: str | None = None) -> None:
        study = optuna.create_study(study_name="s", storage=open_storage(url), load_if_exists=True,
                                    sampler=seeding.GridSampler(grid, seed=5))
        recover_stale_trials(study)
        if not study.trials:
            for x in grid["x"]:
                study.enqueue_trial({"x": x, "y": 0})

        def behind(study) -> int:
            return sum(1 for t in study.get_trials(deepcopy=False) if t.state.is_finished() and not seeding.is_lost(t))

        def objective(trial: optuna.Trial) -> float:
            x, y = trial.suggest_categorical("x", grid["x"]), trial.suggest_categorical("y", grid["y"])
            if stop_at is not None and behind(trial.study) >= stop_at:
                if how == "kill":
                    raise Killed
                trial.set_user_attr(FAIL_REASON, "interrupted (Ctrl-C) during this trial")  # as Objective does
                raise KeyboardInterrupt
            return 10.0 * x + y

        try:
            while behind(study) < 10:
                study.optimize(objective, n_trials=1)
        except (Killed, KeyboardInterrupt):
            pass

    def points(url: str) -> list[tuple]:
        trials = optuna.load_study(study_name="s", storage=url).trials
        return [(t.params, t.values, t.system_attrs.get("grid_id")) for t in trials if not seeding.is_lost(t)]

    straight, stopped = f"sqlite:///{tmp_path}/straight.db", f"sqlite:///{tmp_path}/stopped.db"
    process(straight)
    for stop_at, how in ((6, "ctrl-c"), (8, "kill")):
        process(stopped, stop_at, how)
    process(stopped)
    trials = optuna.load_study(study_name="s", storage=stopped).trials
    lost = [t for t in trials if seeding.is_lost(t)]
    assert [t.number for t in lost] == [6, 9] and all(t.system_attrs["grid_id"] in (0, 1, 2) for t in lost)
    assert trials[7].system_attrs["grid_id"] == lost[0].system_attrs["grid_id"]  # the stopped point drawn again
    retry = next(t for t in trials if t.user_attrs.get(RETRY_OF) == 9)
    assert retry.system_attrs["grid_id"] == lost[1].system_attrs["grid_id"]
    assert points(stopped) == points(straight)
    assert len({str(p) for p, _, _ in points(straight)[:9]}) == 6  # every point before any again


def test_workers_share_one_grid_order(tmp_path):
    """Two workers' grid samplers on one study (made as join_study makes them): each point once. With
    seed + worker, as before, their shuffles differed and a stored grid id meant another point to each."""
    space = space_of([p for p in conditional_params() if p.name in ("a", "d", "e")])  # 3 x 2 x 3 points
    settings = StudySettings.from_attrs({"sampler": "grid", "seed": 5})
    workers = [make_sampler(settings, space, worker=i) for i in range(2)]
    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path}/s.db"), sampler=workers[0])
    for i in range(18):
        study.sampler = workers[i % 2]
        study.optimize(lambda t: normalize(space, trial_chooser(t, set(grid_space(space))), [])["e"], n_trials=1)
    assert len({str(sorted(t.params.items())) for t in study.trials}) == 18
    assert workers[0].is_exhausted(study) and workers[1].is_exhausted(study)


def test_workers_do_not_propose_in_lockstep(tmp_path):
    """Two workers with one seed: their trials have different numbers, so different draws."""
    settings = StudySettings.from_attrs({"sampler": "tpe", "seed": 5})
    workers = [make_sampler(settings, SPACE, worker=i) for i in range(2)]
    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path}/s.db"), sampler=workers[0],
                                directions=["minimize"] * 2)
    for _ in range(6):  # both ask before either tells, as parallel workers do
        asked = []
        for sampler in workers:
            study.sampler = sampler
            trial = study.ask()
            asked.append((trial, normalize(SPACE, trial_chooser(trial), [])))
        assert asked[0][1] != asked[1][1]
        for trial, config in asked:
            study.tell(trial, [config["e"], 1.0 - config["e"]])


def test_a_study_stores_its_seed_once(tmp_path):
    """Without --seed, create_or_resume draws one and stores it; a resume keeps it (sampler_options says how
    the sampler is seeded)."""
    storage = open_storage(f"sqlite:///{tmp_path}/s.db")
    problem = SimpleNamespace(space=load_space(os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml")))
    study, settings = create_or_resume("s", storage, None, StudySettings.from_attrs({"sampler": "tpe"}), problem)
    seed = settings.seed
    assert isinstance(seed, int) and study.sampler.study_seed == seed
    assert sampler_options(study.sampler) == {"class": "TPESampler", "multivariate": True, "group": True,
                                              "n_startup_trials": 10, "constant_liar": True, "seeded": "per trial"}
    again = load_existing("s", storage)
    resumed, settings = create_or_resume("s", storage, again, stored_settings(again), problem)
    assert settings.seed == seed and resumed.sampler.study_seed == seed
    assert resumed.user_attrs["tuner_settings"]["seed"] == seed


def test_gp_resumes_exactly(tmp_path):
    """The GP sampler's kernel fit starts from the defaults in each trial (Optuna's warm start from the
    process's previous fit is dropped), so a resumed process fits what a straight run fits."""
    torch_or_skip()

    def sampler():
        return seeding.GPSampler(seed=3, n_startup_trials=3)

    straight, stopped = f"sqlite:///{tmp_path}/straight.db", f"sqlite:///{tmp_path}/stopped.db"
    run(straight, sampler, 7)
    run(stopped, sampler, 7, stop_at=5)
    run(stopped, sampler, 7)
    assert kept(stopped) == kept(straight)


def test_each_sampler_name_makes_its_sampler_and_records_what_changes_its_proposals():
    made = {name: make_sampler(StudySettings.from_attrs({"sampler": name, "seed": 5}), SPACE)
            for name in ("tpe", "nsga2", "random", "grid")}
    assert {n: type(s).__name__ for n, s in made.items()} == {
        "tpe": "TPESampler", "nsga2": "NSGAIISampler", "random": "RandomSampler", "grid": "GridSampler"}
    assert sampler_options(made["nsga2"]) == {"class": "NSGAIISampler", "population_size": 50, "seeded": "per trial"}
    assert sampler_options(made["random"]) == {"class": "RandomSampler", "seeded": "per trial"}


def test_gp_names_the_gp_sampler():
    torch_or_skip()
    made = make_sampler(StudySettings.from_attrs({"sampler": "gp", "seed": 5}), SPACE)
    assert type(made).__name__ == "GPSampler" and isinstance(made, seeding.PerTrialSeed)


def test_the_grid_hands_out_unstarted_points_first_then_the_points_still_running():
    sampler = seeding.GridSampler({"x": [0, 1, 2]}, seed=5)
    study = optuna.create_study(sampler=sampler)

    def start():
        trial = study.ask()
        trial.suggest_categorical("x", [0, 1, 2])
        return trial

    done = start()
    study.tell(done, 1.0)
    running = start()
    ids = {t.number: t.system_attrs["grid_id"] for t in study.trials}
    assert sampler._get_unvisited_grid_ids(study) == sorted({0, 1, 2} - set(ids.values()))
    last = start()
    ids = {t.number: t.system_attrs["grid_id"] for t in study.trials}
    # every point started: the ones not finished, so each is evaluated before the study stops
    assert sampler._get_unvisited_grid_ids(study) == sorted([ids[running.number], ids[last.number]])
