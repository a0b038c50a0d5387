"""Route variants before layers (issue 27), with real builds in child processes and real SQLite studies:
a route none of whose variants builds is dropped with one note and the study goes on; OpenVINO's int8
variants on the demo encoder (attention: model type TRANSFORMER, SmoothQuant off where layers stay in
float) condition the ranking and the greedy trial, which takes bf16 float parts where the CPU has BF16."""
import pytest
from needs import backend_or_skip, nncf_or_skip

from tuner.analysis import rankings
from tuner.analysis.variants import choose
from tuner.cli.demo import write_demo_model
from tuner.cli.main import main
from tuner.measure.latency import LatencyProtocol
from tuner.report.view import summary_rows
from tuner.run.options import TuneOptions
from tuner.run.tune import tune_study

FAST = LatencyProtocol(warmup=1, min_runs=3, max_runs=8, max_seconds=0.5)
MASKED = dict(shapes=["x=2x16x32", "mask=2x16"], int_ranges=["mask=0:2"])

# int8-static with ORT's Entropy calibrator over every op type sees the mask's -inf and fails ("range
# [-inf, inf] is not finite"): a real route that cannot build on this model, the only one the space offers.
TWO_ROUTES = """\
name: two-routes
backend: onnxruntime
parameters:
  precision: {type: categorical, choices: [fp32, int8-dynamic, int8-static], default: fp32}
  intra_op_num_threads: {type: int, low: 1, high: 2, default: 2}
  quant_op_types: {type: categorical, choices: [all], default: all, when: {precision: [int8-dynamic, int8-static]}}
  calibration_method: {type: categorical, choices: [Entropy], default: Entropy, when: {precision: [int8-static]}}
layer_overrides:
  keep_float:
    when: {precision: [int8-dynamic]}
    op_types: [MatMul]
    encoding: sensitivity
  static_keep_float:
    key: keep_float
    when: {precision: [int8-static]}
    op_types: [MatMul]
    encoding: sensitivity
"""


def test_a_route_that_cannot_build_is_dropped_with_one_note_and_the_study_goes_on(masked_attention_path, tmp_path,
                                                                                  capsys):
    (tmp_path / "space.yaml").write_text(TWO_ROUTES)
    storage = f"sqlite:///{tmp_path}/drop.db"
    result = tune_study(TuneOptions.of(study="drop", model=masked_attention_path, storage=storage,
                              space=str(tmp_path / "space.yaml"),
                              require="cos<=0.5", seed=0, n_trials=3, protocol=FAST, progress=False, quiet=True,
                              select=False, **MASKED))
    err = capsys.readouterr().err
    settings = result.study.user_attrs["tuner_settings"]
    static, dynamic = settings["rankings"]["static_keep_float"], settings["rankings"]["keep_float"]
    assert "not finite" in static["variants"][0]["failed"] and static["dropped"] and static["order"] == []
    assert err.count("int8-static does not build on this model") == 1  # said once, as a note
    assert static["dropped"] in settings["notes"]
    # the other route was analysed: every layer quantized already holds, so no layer is ranked and the
    # all-quantized engine is queued as the greedy trial
    assert dynamic["variants"][0]["feasible"] and "meets the requirement" in dynamic["skipped"]
    states = [t.state.name for t in result.study.trials]
    assert len(states) == 3 and states.count("COMPLETE") >= 2
    greedy, = [t for t in result.study.trials if t.user_attrs.get("enqueued") == "greedy"]
    assert greedy.user_attrs["config"]["precision"] == "int8-dynamic" and greedy.user_attrs["config"]["keep_float"] == []
    assert main(["status", "--study", "drop", "--storage", storage]) == 0
    out = capsys.readouterr().out
    assert "route variants of onnxruntime int8-static" in out and "does not build" in out
    # asked for explicitly, the same route is refused in one line
    assert main(["sensitivity", masked_attention_path, "--space", str(tmp_path / "space.yaml"), "--route", "int8-static",
                 "--shape", "x=2x16x32", "--shape", "mask=2x16", "--int-range", "mask=0:2",
                 "--out", str(tmp_path / "sens")]) == 2
    assert "route int8-static does not build on this model" in capsys.readouterr().err


OV_SPACE = """\
name: openvino-variants
backend: openvino
parameters:
  precision: {type: categorical, choices: [fp32, int8], default: fp32}
  static_shapes: {type: bool, default: true}
  inference_precision: {type: categorical, choices: [f32, bf16], default: f32}
  int8_model_type: {type: categorical, choices: [none, transformer], default: none, when: {precision: [int8]}}
  int8_smooth_quant: {type: bool, default: true, when: {precision: [int8], int8_model_type: [transformer]}}
  int8_preset: {type: categorical, choices: [performance, mixed], default: performance, \
when: {precision: [int8], int8_model_type: [none]}}
  int8_preset_transformer: {type: categorical, choices: [performance, mixed], default: mixed, key: int8_preset, \
when: {precision: [int8], int8_model_type: [transformer]}}
  int8_overflow_fix: {type: categorical, choices: [first_layer, enable, disable], default: first_layer, when: {precision: [int8]}}
layer_overrides:
  keep_float:
    when: {precision: [int8]}
    unless: {int8_smooth_quant: [true]}
    op_types: [MatMul]
    granularity: group
    group_pattern: '^(block\\d+)/'
    encoding: sensitivity
"""


@pytest.fixture(scope="module")
def openvino_study(tmp_path_factory):
    backend_or_skip("openvino")
    nncf_or_skip()
    tmp = tmp_path_factory.mktemp("ov-variants")
    planted = write_demo_model(str(tmp / "planted.onnx"), outliers=2)
    (tmp / "space.yaml").write_text(OV_SPACE)
    storage = f"sqlite:///{tmp}/ov.db"
    with pytest.MonkeyPatch.context() as mp:  # a cache of its own: a module fixture runs before conftest's _cache
        mp.setenv("TUNER_CACHE", str(tmp / "cache"))
        # The analysis skips the ranking of a route whose variants read clearly slower than fp32 (quick timing):
        # the demo's int8 reads close to its fp32, and a loaded machine tips it. Not what this tests.
        mp.setattr(rankings, "NOT_FASTER", float("inf"))
        study = tune_study(TuneOptions.of(study="ov", model=planted, storage=storage, space=str(tmp / "space.yaml"),
                                 shapes=["x=2x64x256"], require="cos<=0.002", seed=0, n_trials=2, protocol=FAST,
                                 progress=False, quiet=True, select=False)).study
    return study, storage


def test_openvino_ranks_the_layers_for_its_best_int8_variant(openvino_study):
    from tuner.backends.openvino.device import plugin_info

    study, _ = openvino_study
    ranking = study.user_attrs["tuner_settings"]["rankings"]["keep_float"]
    rows = ranking["variants"]
    # the demo has attention: TRANSFORMER variants, SmoothQuant off but once, and no layers under SmoothQuant
    assert rows[0]["options"]["int8_model_type"] == "none"
    assert any(r["options"].get("int8_model_type") == "transformer" and r["options"]["int8_smooth_quant"] is False
               for r in rows)
    sq_on = [r for r in rows if r["options"].get("int8_smooth_quant") is True]
    assert len(sq_on) == 1 and sq_on[0]["layers"] is False and not sq_on[0]["chosen"]
    chosen, = [r for r in rows if r["chosen"]]
    assert chosen["layers"] and ranking["variant"] == chosen["options"]
    assert rows.index(chosen) == choose(rows)  # the lowest error among the variants not clearly slower
    bf16 = "BF16" in plugin_info()["capabilities"]
    # an expert's settings where the space offers them: static shapes here, bf16 float parts where the CPU has BF16
    assert ranking["settings"] == {"static_shapes": True} | ({"inference_precision": "bf16"} if bf16 else {})
    assert ranking["route"].get("inference_precision", "f32") == ("bf16" if bf16 else "f32")
    assert ranking["greedy_feasible"] and set(ranking["order"][:ranking["cut"]]) <= {"block1", "block3"}
    # the greedy trial is built with the variant's options and the bf16 float parts where the CPU has BF16
    greedy, = [t for t in study.trials if t.user_attrs.get("enqueued") == "greedy"]
    config = greedy.user_attrs["config"]
    assert {k: config.get(k) for k in chosen["options"]} == chosen["options"]
    assert config["inference_precision"] == ("bf16" if bf16 else "f32")
    assert config["keep_float"] and greedy.user_attrs["metrics"]["cos"] <= 0.002
    assert ranking["analysis_builds"] >= len(rows) + 1


def test_status_and_the_report_print_the_variant_table(openvino_study, capsys):
    study, storage = openvino_study
    assert main(["status", "--study", "ov", "--storage", storage]) == 0
    out = capsys.readouterr().out
    assert "route variants of openvino int8 (keep_float)" in out and "(chosen)" in out
    assert "no layer kept in float under it" in out and "greedy float set" in out
    rows = summary_rows(study)
    assert any(k == "route variants" for k, _ in rows) and any(k == "variant" and "(chosen)" in v for k, v in rows)
