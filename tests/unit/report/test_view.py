"""The report's summary rows (tuner.report.view.summary_rows) on a study made in memory."""
from memory_studies import stats, two_objective_study, winner

from tuner.report import summary_rows


def test_the_report_says_the_notes_and_the_finalists():
    finalists = [{"trial": 1, "baseline": False, "feasible": True} | stats(3.0, 0.2),
                 {"trial": 0, "baseline": True, "feasible": True} | stats(3.1, 0.2)]
    note = "no --require: every trial counts as feasible"
    rows = dict(summary_rows(two_objective_study([(3.1, 0.0, True), (3.0, 1e-3, False)], winner=winner(finalists, 1),
                                                 notes=[note])))
    assert rows["note"] == note
    assert rows["finalist trial 1"].startswith("3.000 ms, p10-p90") and "(winner)" in rows["finalist trial 1"]
    assert "ties trial 0 (the baseline) within noise" in rows["tie within noise"]


def test_the_report_says_what_the_winner_computed_in_and_its_speed_over_each_runtimes_defaults():
    finalists = [{"trial": 1, "baseline": False, "feasible": True} | stats(3.0, 0.2),
                 {"trial": 0, "baseline": True, "feasible": True} | stats(3.1, 0.2)]
    won = winner(finalists, 1) | {
        "precision": {"inference": "f32", "source": "ONNX Runtime's optimized graph, level all",
                      "quantized_nodes": 24, "float_nodes": 8, "quantized": ["int8"]},
        "vs_defaults": {"onnxruntime": 1.03, "openvino": 0.41},
        "defaults": {"onnxruntime": {"trial": 0, "feasible": True}, "openvino": {"trial": None, "feasible": True}}}
    rows = dict(summary_rows(two_objective_study([(3.1, 0.0, True), (3.0, 1e-3, False)], winner=won)))
    assert rows["winner"].endswith("precision int8-dynamic, computed as int8 + fp32 (ONNX Runtime's optimized graph, "
                                   "level all; 24 of 32 matrix ops quantized)")
    assert rows["winner against each runtime's defaults"] == ("0.41x OpenVINO's defaults, 1.03x ONNX Runtime's "
                                                              "(timed side by side)")
    assert rows["baseline"].endswith("precision fp32")  # a trial measured before engines said what they ran


def test_latencies_far_apart_are_drawn_on_a_log_axis():
    from tuner.report.charts import LOG_SPAN, latency_scale

    assert latency_scale([0.25, 0.3, 1.0]) == "linear"
    assert latency_scale([0.25, 0.3, 0.25 * LOG_SPAN]) == "log"  # one engine 800x the baseline flattened the rest
    assert latency_scale([float("inf"), 0.3, 0.0]) == "linear" and latency_scale([]) == "linear"
