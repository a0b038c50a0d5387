"""The finalists side by side (tuner.report.finalists) as tune and select print them: each one's
timing, the winner and the baseline marked, a tie within noise said only when the CIs overlap."""
import optuna
from memory_studies import stats, winner

from tuner.report.finalists import finalist_rows
from tuner.run.tune import TuneResult, describe_result
from tuner.search.record import Winner


def test_tune_and_select_show_the_finalists_and_a_tie_within_noise():
    finalists = [{"trial": 7, "baseline": False, "feasible": True} | stats(3.20, 0.05),
                 {"trial": 12, "baseline": False, "feasible": True} | stats(3.22, 0.05),
                 {"trial": 0, "baseline": True, "feasible": True} | stats(3.60, 0.04),
                 {"trial": 4, "baseline": False, "feasible": False} | stats(2.90, 0.04, 10.0, 96.0)]
    lines = describe_result(TuneResult(optuna.create_study(), winner(finalists, 7), 0))
    text = "\n".join(lines)
    assert "finalists, timed side by side" in text
    row = next(line for line in lines if line.strip().startswith("trial 12"))
    assert "3.220 ms, p10-p90 3.059-3.381, 95% CI [3.170, 3.270]" in row
    assert "(winner)" in next(line for line in lines if line.strip().startswith("trial 7"))
    assert "(baseline)" in next(line for line in lines if line.strip().startswith("trial 0 "))
    failed = next(line for line in lines if line.strip().startswith("trial 4"))
    assert "failed the accuracy re-check" in failed and "unsteady" in failed
    tie = [line for line in lines if line.startswith("tie:")]
    assert len(tie) == 1 and "trial 7 ties trial 12 within noise" in tie[0] and "(the baseline)" not in tie[0]


def test_no_tie_is_claimed_when_the_cis_are_apart():
    finalists = [{"trial": 7, "baseline": False, "feasible": True} | stats(3.00, 0.05),
                 {"trial": 0, "baseline": True, "feasible": True} | stats(3.60, 0.05)]
    rows = finalist_rows(Winner.from_attrs(winner(finalists, 7)))
    assert [label for label, _ in rows] == ["trial 7", "trial 0"]
    finalists[1] = finalists[1] | stats(3.04, 0.05)
    label, text = finalist_rows(Winner.from_attrs(winner(finalists, 7)))[-1]
    assert label == "tie" and "(the baseline)" in text


def test_the_winner_line_shows_the_metrics_the_requirement_names_and_no_other():
    finalists = [{"trial": 7, "baseline": False, "feasible": True} | stats(3.00, 0.05)]
    won = winner(finalists, 7) | {"requirement": "rel_l2<=0.01", "confirmed_metrics": {"rel_l2": 0.004, "l2": 3.5}}
    first = describe_result(TuneResult(optuna.create_study(), won, 0))[0]
    assert "rel_l2=0.004" in first and " l2=" not in first  # "l2" is inside "rel_l2<=...", not named by it


OV_INT8 = {"inference": "bf16", "source": "OpenVINO INFERENCE_PRECISION_HINT bf16", "quantized_nodes": 23,
           "float_nodes": 1, "quantized": ["int8"]}


def test_the_closing_lines_say_the_precision_as_run_and_end_against_each_runtimes_defaults():
    finalists = [{"trial": 7, "baseline": False, "feasible": True} | stats(0.80, 0.02),
                 {"trial": 1, "baseline": False, "feasible": True, "defaults": "openvino"} | stats(0.89, 0.02),
                 {"trial": 0, "baseline": True, "feasible": True, "defaults": "onnxruntime"} | stats(3.38, 0.05)]
    won = winner(finalists, 7) | {
        "config": {"backend": "openvino", "precision": "int8", "keep_float": ["block1/attn/q_proj"]},
        "precision": OV_INT8, "vs_defaults": {"onnxruntime": 4.23, "openvino": 1.11},
        "defaults": {"onnxruntime": {"trial": 0, "feasible": True}, "openvino": {"trial": 1, "feasible": True}}}
    lines = describe_result(TuneResult(optuna.create_study(), won, 0))
    assert lines[0].endswith("openvino, precision int8, computed as int8 + bf16 (OpenVINO INFERENCE_PRECISION_HINT bf16; "
                             "23 of 24 matrix ops quantized)"), lines[0]
    assert lines[1] == "  1 nodes kept in float (bf16 here)"
    assert lines[-1] == ("winner against each runtime's defaults: 1.11x OpenVINO's defaults, 4.23x ONNX Runtime's "
                         "(timed side by side)")
    assert "(OpenVINO's defaults)" in next(line for line in lines if line.strip().startswith("trial 1 "))
    assert "defaults" not in next(line for line in lines if line.strip().startswith("trial 0 "))  # the baseline says so


def test_a_winner_selected_before_says_neither_and_a_runtime_that_failed_says_why():
    finalists = [{"trial": 7, "baseline": False, "feasible": True} | stats(3.00, 0.05)]
    lines = describe_result(TuneResult(optuna.create_study(), winner(finalists, 7), 0))
    assert lines[0].endswith(", cos=0.0001, precision int8-dynamic") and lines[1] == "  0 nodes kept in float"
    assert not any(line.startswith("winner against") for line in lines)
    from tuner.report.as_run import vs_defaults_text

    text = vs_defaults_text(Winner.from_attrs({"trial": 1, "vs_defaults": {"openvino": 1.0, "onnxruntime": 0.8},
                             "defaults": {"openvino": {"trial": 1, "feasible": True},
                                          "onnxruntime": {"trial": None, "feasible": False},
                                          "tensorrt": {"trial": None, "error": "UserError: no GPU"}}}))
    assert text == ("0.80x ONNX Runtime's defaults (they fail the requirement), 1.00x OpenVINO's (the winner is them) "
                    "(timed side by side); TensorRT's defaults did not build (UserError: no GPU)")


def test_a_quantizing_route_that_runs_in_float_says_so_and_a_float_route_needs_no_count():
    from tuner.report.as_run import kept_in_float, precision_text

    ov = {"inference": "bf16", "source": "OpenVINO INFERENCE_PRECISION_HINT bf16", "quantized_nodes": 0, "float_nodes": 24}
    assert precision_text({"precision": "fp32"}, ov) == ("precision fp32, computed as bf16 "
                                                         "(OpenVINO INFERENCE_PRECISION_HINT bf16)")
    qdq = {"inference": "f32", "source": "ONNX Runtime's optimized graph, level basic", "quantized_nodes": 0, "float_nodes": 32}
    assert precision_text({"precision": "int8-static"}, qdq) == ("precision int8-static, computed as fp32 (ONNX Runtime's "
                                                                 "optimized graph, level basic; 0 of 32 matrix ops quantized)")
    assert kept_in_float(0, ov) == "0 nodes kept in float" and kept_in_float(2, ov) == "2 nodes kept in float (bf16 here)"
    assert kept_in_float(2, qdq) == "2 nodes kept in float"
