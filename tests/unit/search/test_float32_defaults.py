"""A runtime whose defaults missed the requirement gets its defaults in float32 queued next (once per study),
where the space offers its float32 settings; a runtime whose defaults met it, or whose space cannot say
float32, gets nothing."""
from types import SimpleNamespace

import optuna
import pytest
from needs import backend_or_skip
from optuna.distributions import CategoricalDistribution

from tuner.inputs.space import load_space
from tuner.search.enqueue import enqueue_float32_defaults, params_for
from tuner.search.record import BASELINE, ENQUEUED
from tuner.search.trials import is_first_look, is_runtime_defaults

SPACE = """\
name: two
backend: onnxruntime
parameters:
  backend: {{type: categorical, choices: [onnxruntime, openvino], default: onnxruntime}}
  graph_optimization_level: {{type: categorical, choices: [basic, all], default: all, when: {{backend: [onnxruntime]}}}}
  inference_precision: {{type: categorical, choices: [{choices}], default: auto, when: {{backend: [openvino]}}}}
"""


def context(tmp_path, choices="auto, f32, bf16"):
    backend_or_skip("openvino")  # its Backend class says what float32 takes (the f32 hint)
    path = tmp_path / "space.yaml"
    path.write_text(SPACE.format(choices=choices))
    space = load_space(str(path))
    problem = SimpleNamespace(space=space, graph_nodes=[], backend_name=lambda c: c.get("backend") or "onnxruntime")
    study = optuna.create_study(directions=["minimize", "minimize"])
    return SimpleNamespace(study=study, problem=problem, settings=SimpleNamespace(sampler="tpe", rankings=None))


def add_defaults(ctx, backend: str, error: float, bound: float = 0.01) -> dict:
    """A completed defaults trial of `backend`, whose cos error is `error`."""
    params = params_for(ctx.problem.space, [], {"backend": backend}, False)
    attrs = {BASELINE: True} if backend == "onnxruntime" else {ENQUEUED: f"{backend} defaults"}
    dists = {p.name: CategoricalDistribution(p.choices) for p in ctx.problem.space.params if p.name in params}
    ctx.study.add_trial(optuna.trial.create_trial(
        params=params, distributions=dists, values=[1.0, error], user_attrs=attrs | {"config": dict(params)},
        system_attrs={f"constraints:cos<={bound}": error - bound}))
    return params


def waiting(ctx):
    return ctx.study.get_trials(states=(optuna.trial.TrialState.WAITING,))


def test_defaults_that_miss_the_requirement_are_tried_in_float32_next_once(tmp_path):
    ctx = context(tmp_path)
    add_defaults(ctx, "onnxruntime", 1e-13)
    ov = add_defaults(ctx, "openvino", 0.032)  # bf16 on a CPU with BF16
    assert ov == {"backend": "openvino", "inference_precision": "auto"}
    assert enqueue_float32_defaults(ctx) == 1
    [queued] = waiting(ctx)
    assert queued.system_attrs["fixed_params"] == {"backend": "openvino", "inference_precision": "f32"}  # as enqueued
    assert queued.user_attrs[ENQUEUED] == "openvino defaults in float32"
    # not a runtime's defaults (those are the untouched engines), but run before the analysis with them
    assert is_first_look(queued) and not is_runtime_defaults(queued)
    assert enqueue_float32_defaults(ctx) == 0 and len(waiting(ctx)) == 1  # once per study


@pytest.mark.parametrize("error, choices", [(0.002, "auto, f32, bf16"),  # its defaults met the requirement
                                            (0.032, "auto, bf16")])  # the space cannot say f32
def test_nothing_is_queued_where_the_defaults_met_it_or_float32_is_not_offered(tmp_path, error, choices):
    ctx = context(tmp_path, choices)
    add_defaults(ctx, "openvino", error)
    assert enqueue_float32_defaults(ctx) == 0 and waiting(ctx) == []


def test_a_runtime_without_float32_settings_gets_nothing(tmp_path):
    ctx = context(tmp_path)
    add_defaults(ctx, "onnxruntime", 0.5)  # ONNX Runtime's CPU defaults compute in float32: nothing to set
    assert enqueue_float32_defaults(ctx) == 0 and waiting(ctx) == []


def test_a_runtime_already_seen_does_not_stop_the_next_one_and_the_study_remembers_each(tmp_path):
    ctx = context(tmp_path)
    add_defaults(ctx, "onnxruntime", 0.5)  # missed, but ONNX Runtime has no float32 settings: seen, nothing queued
    assert enqueue_float32_defaults(ctx) == 0
    assert ctx.study.user_attrs["float32_enqueued/onnxruntime"] is True
    add_defaults(ctx, "openvino", 0.032)
    assert enqueue_float32_defaults(ctx) == 1 and len(waiting(ctx)) == 1
    assert ctx.study.user_attrs["float32_enqueued/openvino"] is True


def test_float32_defaults_queued_already_by_the_user_are_not_queued_twice(tmp_path):
    ctx = context(tmp_path)
    add_defaults(ctx, "openvino", 0.032)
    ctx.study.enqueue_trial({"backend": "openvino", "inference_precision": "f32"})  # --enqueue gave it
    enqueue_float32_defaults(ctx)
    assert len(waiting(ctx)) == 1
