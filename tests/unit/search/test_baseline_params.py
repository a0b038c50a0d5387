"""The baseline's Optuna parameters (search.enqueue.baseline_params): every parameter at its default, the
per-layer choices of the model's layers where the defaults make them active, and for a grid study every grid
parameter fixed, active or not (Optuna's GridSampler needs them all)."""
from test_objective_reads import GRAPH, study_context

from tuner.search.enqueue import baseline_params

SPACE = """\
name: t
backend: onnxruntime
parameters:
  precision: {{type: categorical, choices: [fp32, int8-dynamic], default: {default}}}
  reduce_range: {{type: bool, default: false, when: {{precision: [int8-dynamic]}}}}
layer_overrides:
  keep_float:
    when: {{precision: [int8-dynamic]}}
    op_types: [MatMul, Gemm]
    granularity: node
    encoding: independent
"""


def _ctx(tmp_path, sampler, default):
    path = tmp_path / f"{sampler}-{default}.yaml"
    path.write_text(SPACE.format(default=default))
    return study_context(tmp_path, sampler, str(path))


def test_the_baseline_of_a_float_default_leaves_out_what_only_quantizing_activates(tmp_path):
    assert baseline_params(_ctx(tmp_path, "random", "fp32")) == {"precision": "fp32"}


def test_a_grid_study_s_baseline_fixes_every_grid_parameter_active_or_not(tmp_path):
    assert baseline_params(_ctx(tmp_path, "grid", "fp32")) == {"precision": "fp32", "reduce_range": False}


def test_a_quantized_default_s_baseline_names_each_layer_s_choice(tmp_path):
    params = baseline_params(_ctx(tmp_path, "random", "int8-dynamic"))
    layers = {f"keep_float/{name}": False for name, _ in GRAPH}
    assert params == {"precision": "int8-dynamic", "reduce_range": False} | layers
