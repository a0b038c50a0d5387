"""One trial through the objective (search.objective.Objective) on a real SQLite study, with an evaluator that
builds nothing and records what it is asked: where the engine goes and what becomes of it, a config measured
before (on this machine, not another), a route known to fail, a failure learnt for the route or the config, the
wait for another study's timing, and the objective's values."""
from __future__ import annotations

import os
from dataclasses import replace
from types import SimpleNamespace

import pytest
from optuna.trial import TrialState, create_trial
from test_objective_reads import GRAPH, REQUIRE, study_context

from tuner.errors import TrialFailure
from tuner.inputs.configs import route_choice
from tuner.measure.guard import MIN_WINDOWS
from tuner.measure.requirement import Requirement
from tuner.search.enqueue import baseline_params
from tuner.search.failures import KNOWN_FAILURE, PREFIX, failure_key
from tuner.search.objective import Objective, baseline_band, give_up_ratio
from tuner.search.record import FAIL_REASON, LOCK_WAIT_S, REUSED_FROM, TrialRecord
from tuner.search.samplers import grid_space


class Evaluator:
    """Writes a file into the engine folder it is given and returns a fixed record (or raises `fail`)."""

    def __init__(self, metrics=None, fail=None, waited=0.0):
        self.calls, self.fail, self.metrics = [], fail, metrics if metrics is not None else {"cos": 0.004}
        self.asked = []  # (config, band, give_up_above) of each measure
        self.lock_waits = SimpleNamespace(take=lambda: waited)

    def measure(self, config, out_dir, band=None, give_up_above=None) -> TrialRecord:
        self.calls.append(out_dir)
        self.asked.append((config, band, give_up_above))
        os.makedirs(out_dir)
        open(os.path.join(out_dir, "engine.bin"), "w").close()
        if self.fail is not None:
            raise self.fail
        violations = Requirement.parse(REQUIRE).violations(self.metrics)
        return TrialRecord(config, {"median_ms": 2.5}, self.metrics, {}, violations, True, build_s=0.0,
                           engine_bytes=1, backend="test", timing="alone", engine_dir=out_dir)


def _run(ctx, evaluator, engines, n=1, keep=False):
    params = baseline_params(ctx)
    for _ in range(n):
        ctx.study.enqueue_trial(params)
    ctx.study.optimize(Objective(ctx, evaluator, engines_dir=engines, keep_engines=keep), n_trials=n,
                       catch=(TrialFailure,))
    return ctx.study.trials[-n:]


def test_a_config_measured_before_on_this_machine_is_reused_and_on_another_is_measured(tmp_path):
    ctx = study_context(tmp_path, "random")
    engines, ev = str(tmp_path / "engines"), Evaluator()
    first, again = _run(ctx, ev, engines, n=2)
    assert ev.calls == [os.path.join(engines, "trial-0")]  # one build: its folder is named by the trial
    assert again.user_attrs[REUSED_FROM] == 0 and again.values == first.values
    elsewhere = replace(ctx, settings=replace(ctx.settings, machine={"cpu": "another", "versions": {}}))
    third, = _run(elsewhere, ev, engines)
    assert REUSED_FROM not in third.user_attrs and ev.calls[-1] == os.path.join(engines, "trial-2")


@pytest.mark.parametrize("keep", [False, True])
def test_the_engine_folder_goes_unless_engines_are_kept(tmp_path, keep):
    ctx = study_context(tmp_path, "random")
    engines = str(tmp_path / "engines")
    t, = _run(ctx, Evaluator(), engines, keep=keep)
    folder = os.path.join(engines, "trial-0")
    assert os.path.isdir(folder) is keep
    assert t.user_attrs.get("engine_dir") == (folder if keep else None)


def test_the_values_are_the_latency_and_the_primary_metric_s_error(tmp_path):
    ctx = study_context(tmp_path, "random")
    t, = _run(ctx, Evaluator(), str(tmp_path / "engines"))
    assert dict(zip(ctx.objectives, t.values)) == {"latency": 2.5, "error": 0.004}
    os.makedirs(tmp_path / "none")
    ctx = study_context(tmp_path / "none", "random")
    t, = _run(ctx, Evaluator(metrics={}), str(tmp_path / "engines2"))  # the metric missing: the worst error
    assert dict(zip(ctx.objectives, t.values))["error"] == 1e30


def test_a_route_known_to_fail_is_pruned_without_a_build(tmp_path):
    ctx = study_context(tmp_path, "random")
    ev = Evaluator()
    first, = _run(ctx, Evaluator(fail=TrialFailure("no kernel", "error", "building")), str(tmp_path / "e1"))
    assert first.state == TrialState.FAIL and first.user_attrs[FAIL_REASON] == "no kernel"
    config = first.user_attrs["config"]
    learnt = ctx.study.user_attrs[PREFIX + failure_key(route_choice(ctx.problem.space, config))]
    assert learnt == {"trial": 0, "reason": "no kernel", "choice": route_choice(ctx.problem.space, config)}
    second, = _run(ctx, ev, str(tmp_path / "e2"))
    assert second.state == TrialState.PRUNED and ev.calls == []
    assert second.user_attrs[KNOWN_FAILURE]["trial"] == 0


def test_a_timing_timeout_is_learnt_for_the_config_and_a_crash_for_nothing(tmp_path):
    ctx = study_context(tmp_path, "random")
    t, = _run(ctx, Evaluator(fail=TrialFailure("too slow to time", "timeout", "timing")), str(tmp_path / "e1"))
    config = t.user_attrs["config"]
    assert ctx.study.user_attrs[PREFIX + failure_key(config)]["reason"] == "too slow to time"
    assert PREFIX + failure_key(route_choice(ctx.problem.space, config)) not in ctx.study.user_attrs
    os.makedirs(tmp_path / "b")
    ctx = study_context(tmp_path / "b", "random")
    _run(ctx, Evaluator(fail=TrialFailure("the child died", "crash", "building")), str(tmp_path / "e2"))
    assert not [k for k in ctx.study.user_attrs if k.startswith(PREFIX)]


@pytest.mark.parametrize("waited, recorded", [(0.05, None), (0.1, 0.1), (2.34, 2.3)])
def test_a_wait_for_another_study_s_timing_is_recorded_from_a_tenth_of_a_second(tmp_path, waited, recorded):
    ctx = study_context(tmp_path, "random")
    t, = _run(ctx, Evaluator(waited=waited), str(tmp_path / "engines"))
    assert t.user_attrs.get(LOCK_WAIT_S) == recorded


def test_the_evaluator_is_asked_for_the_trial_s_config_with_the_study_s_band_and_give_up_ratio(tmp_path):
    ctx = study_context(tmp_path, "random")
    for i in range(MIN_WINDOWS):  # paired trials on this machine: the baseline's band, the best ratio so far
        ctx.study.add_trial(create_trial(
            values=[0.5 + i / 10, 0.001],
            user_attrs={"baseline_latency": {"median_ms": 10.0 + i}, "relative": {"ratio": 0.5 + i / 10},
                        "machine": ctx.settings.machine, "config": {"trial": i}},
            system_attrs={f"constraints:{b}": -0.004 for b in ctx.problem.requirement.bounds}))
    done = ctx.study.get_trials()
    band, give_up = baseline_band(done, ctx.settings.machine), give_up_ratio(done)
    assert band is not None and give_up is not None
    ev = Evaluator()
    t, = _run(ctx, ev, str(tmp_path / "engines"))
    [(config, asked_band, asked_give_up)] = ev.asked
    assert config == t.user_attrs["config"] and asked_band == band and asked_give_up == give_up


def test_a_trial_pruned_for_a_known_failure_violates_every_bound_and_says_which_trial_failed(tmp_path):
    ctx = study_context(tmp_path, "random")
    _run(ctx, Evaluator(fail=TrialFailure("no kernel", "error", "building")), str(tmp_path / "e1"))
    pruned, = _run(ctx, Evaluator(), str(tmp_path / "e2"))
    assert pruned.state == TrialState.PRUNED
    bounds = {k: v for k, v in pruned.system_attrs.items() if k.startswith("constraints:")}
    assert bounds == {f"constraints:{b}": 1e30 for b in ctx.problem.requirement.bounds} | {"constraints:builds": 1.0}


GRID_SPACE = """\
name: grid
backend: onnxruntime
parameters:
  precision: {type: categorical, choices: [fp32, int8-dynamic], default: fp32}
  intra_op_num_threads: {type: int, low: 1, high: 2, default: 2}
layer_overrides:
  keep_float:
    when: {precision: [int8-dynamic]}
    op_types: [MatMul, Gemm]
    granularity: node
    encoding: independent
"""


def test_a_grid_study_s_trials_take_only_the_grid_s_parameters(tmp_path):
    path = tmp_path / "grid.yaml"
    path.write_text(GRID_SPACE)
    ctx = study_context(tmp_path, "grid", str(path))
    space = ctx.problem.space
    grid = set(grid_space(space))
    ctx.study.optimize(Objective(ctx, Evaluator(), engines_dir=str(tmp_path / "e")), n_trials=4)
    assert space.overrides  # per-layer choices the grid leaves at their default
    for t in ctx.study.trials:
        assert t.state == TrialState.COMPLETE and set(t.params) <= grid and t.params, t.params
    assert {t.params["precision"] for t in ctx.study.trials} == {"fp32", "int8-dynamic"}


def test_another_config_is_built_not_reused_and_a_reuse_of_a_reuse_names_the_build(tmp_path):
    ctx = study_context(tmp_path, "random")
    engines, ev = str(tmp_path / "engines"), Evaluator()
    _run(ctx, ev, engines, n=3)  # the baseline three times: built once
    assert [t.user_attrs.get(REUSED_FROM) for t in ctx.study.trials] == [None, 0, 0]
    other = baseline_params(ctx) | {"intra_op_num_threads": 1}
    ctx.study.enqueue_trial(other)
    ctx.study.optimize(Objective(ctx, ev, engines_dir=engines), n_trials=1)
    assert REUSED_FROM not in ctx.study.trials[-1].user_attrs and len(ev.calls) == 2


def test_a_config_too_slow_to_time_is_pruned_when_it_comes_again(tmp_path):
    ctx = study_context(tmp_path, "random")
    first, = _run(ctx, Evaluator(fail=TrialFailure("too slow to time", "timeout", "timing")), str(tmp_path / "e1"))
    learnt = ctx.study.user_attrs[PREFIX + failure_key(first.user_attrs["config"])]
    assert learnt["trial"] == 0 and learnt["reason"] == "too slow to time"
    ev = Evaluator()
    again, = _run(ctx, ev, str(tmp_path / "e2"))
    assert again.state == TrialState.PRUNED and ev.calls == [] and again.user_attrs[KNOWN_FAILURE]["trial"] == 0


def test_a_study_of_another_sampler_searches_the_per_layer_choices(tmp_path):
    path = tmp_path / "grid.yaml"
    path.write_text(GRID_SPACE)  # the same space, sampled at random
    ctx = study_context(tmp_path, "random", str(path))
    ctx.study.enqueue_trial({"precision": "int8-dynamic"})  # the per-layer choices left to the sampler
    ctx.study.optimize(Objective(ctx, Evaluator(), engines_dir=str(tmp_path / "e")), n_trials=1)
    params = ctx.study.trials[-1].params
    assert {k for k in params if k.startswith("keep_float/")} == {f"keep_float/{name}" for name, _ in GRAPH}
