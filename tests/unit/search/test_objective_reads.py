"""What the objective adds to the storage calls Optuna makes for a trial anyway (issue 31: the tuner's own
cost per trial): no read of the study's trials of its own (it shares the one its sampler made for the trial,
tuner.search.trials.trials_of_this_trial), one read of the study's attributes (the failures learnt) and two
writes (the config when suggested, the record at the end): three transactions.
Counted on a real SQLite study against a bare objective that suggests the same config and records nothing."""
from __future__ import annotations

import os
import traceback
from dataclasses import replace
from types import SimpleNamespace

import optuna
import pytest
from sqlalchemy import event

from tuner.inputs.configs import normalize, trial_chooser
from tuner.inputs.space import SPACES_DIR, load_space
from tuner.measure.requirement import Requirement
from tuner.search.choices import Timing
from tuner.search.objective import Objective
from tuner.search.record import TrialRecord
from tuner.search.settings import StudySettings
from tuner.search.study import StudyContext, create_or_resume
from tuner.store.storage import open_storage

REQUIRE = "cos<=0.01"
GRAPH = [("block0/attn/MatMul", "MatMul"), ("head/Gemm", "Gemm")]


class Evaluator:
    """Builds nothing: the same record for every config."""

    lock_waits = SimpleNamespace(take=lambda: 0.0)

    def measure(self, config, out_dir, band=None, give_up_above=None) -> TrialRecord:
        metrics = {"cos": 0.001}
        violations = Requirement.parse(REQUIRE).violations(metrics)
        return TrialRecord(config, {"median_ms": 1.0 + len(str(config)) / 1e3}, metrics, {}, violations, True,
                           build_s=0.0, engine_bytes=0, backend="test", timing="alone")


def study_context(tmp_path, sampler: str, space: str = os.path.join(SPACES_DIR, "onnxruntime-cpu.yaml")) -> StudyContext:
    prob = SimpleNamespace(space=load_space(space), graph_nodes=GRAPH,
                           requirement=Requirement.parse(REQUIRE))
    settings = replace(StudySettings.from_attrs({"sampler": sampler, "seed": 3, "require": REQUIRE}),
                       machine={"cpu": "test", "versions": {}}, timing=Timing.ALONE, backend="onnxruntime")
    storage = open_storage(f"sqlite:///{tmp_path}/{sampler}.db")
    study, settings = create_or_resume("s", storage, None, settings, prob)
    return StudyContext(study, settings, prob, "")


def _from_the_objective() -> int:
    """1 for a call the objective makes itself (a frame of tuner/search/objective.py on the stack), else 0: a
    parameter it suggests is sampled inside it, and the sampler's reads for that (a frame of
    optuna/samplers/) are Optuna's, not the objective's."""
    files = [f.filename for f in traceback.extract_stack()]
    return int(any(f.endswith(os.path.join("search", "objective.py")) for f in files)
               and not any(os.path.join("optuna", "samplers") in f for f in files))


def calls_of_one_trial(study: optuna.Study, objective) -> tuple[int, int]:
    """(reads of all trials from inside the objective, transactions other than the suggested parameters')
    made by one study.optimize trial: configs differ in how many parameters they suggest, and the sampler
    reads the trials once per parameter it samples on its own. Optuna's reads commit too."""
    reads, params, commits = [], [], []
    storage = study._storage
    read, set_param = storage.get_all_trials, storage.set_trial_param
    storage.get_all_trials = lambda *a, **k: reads.append(_from_the_objective()) or read(*a, **k)
    storage.set_trial_param = lambda *a, **k: params.append(1) or set_param(*a, **k)
    listen = (storage._backend.engine, "commit", lambda conn: commits.append(1))
    event.listen(*listen)
    try:
        study.optimize(objective, n_trials=1)
    finally:
        event.remove(*listen)
        storage.get_all_trials, storage.set_trial_param = read, set_param
    return sum(reads), len(commits) - len(params)


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_the_objective_adds_no_read_of_the_trials_and_three_transactions(tmp_path, sampler):
    ctx = study_context(tmp_path, sampler)
    objective = Objective(ctx, Evaluator(), engines_dir=str(tmp_path / "engines"), trial_attrs={"worker": "w"})

    def bare(trial):
        normalize(ctx.problem.space, trial_chooser(trial, None), ctx.problem.graph_nodes, ctx.settings.rankings)
        return [1.0] * len(ctx.objectives)

    for _ in range(12):  # past TPE's startup trials: its model reads the study too
        tuner_reads, tuner_commits = calls_of_one_trial(ctx.study, objective)
        bare_reads, bare_commits = calls_of_one_trial(ctx.study, bare)
        assert tuner_reads == bare_reads == 0
        if sampler == "random":  # TPE writes its proposal (constant liar) in some trials and not in others
            reused = "reused_from" in ctx.study.trials[-2].user_attrs  # a reused build learns no failures
            assert tuner_commits == bare_commits + (2 if reused else 3)
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in ctx.study.trials)
    done = [t for t in ctx.study.trials if "config" in t.user_attrs]
    assert len(done) == 12
    assert all(t.user_attrs["worker"] == "w" and t.constraints == {REQUIRE: pytest.approx(-0.009)} for t in done)
