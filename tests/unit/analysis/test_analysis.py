"""The route gate (tuner.analysis.rankings): no layer is ranked for a route whose fastest variant, every layer
quantized, is not faster than the fp32 engine beyond its interval, timed in turn with it."""
from tuner.analysis.rankings import NOT_FASTER, gate_line, slower_than_fp32


def _row(ratio, ci=None, layers=True):
    return {"options": {}, "layers": layers, "error": 0.1, "ms": 2.0 * ratio, "fp32_ms": 2.0, "ratio": ratio,
            "ratio_ci": ci or [ratio * 0.97, ratio * 1.03], "feasible": False}


def test_a_route_slower_than_fp32_is_not_ranked():
    # OpenVINO's all-int8 variants on an AVX2 CPU without VNNI: 1.19-1.24x its fp32 engine
    rows = [_row(1.24), _row(1.19, [1.15, 1.23])]
    assert slower_than_fp32(rows) is rows[1]  # the fastest variant speaks for the route
    line = gate_line("openvino int8", rows[1])
    assert line.startswith("openvino int8: its fastest variant, every layer quantized, runs at 1.19x [95% 1.15-1.23] "
                           "the fp32 engine's latency (2.38 ms against 2.00 ms), timed in turn")


def test_a_route_not_faster_beyond_the_noise_is_not_ranked_and_one_that_is_faster_is():
    assert slower_than_fp32([_row(0.97, [0.93, 1.01])]) is not None  # 3% faster, inside the noise: no gain to keep
    assert slower_than_fp32([_row(0.97, [0.93, NOT_FASTER - 0.001])]) is None
    assert slower_than_fp32([_row(1.24), _row(0.68)]) is None  # VNNI kernels win: its layers are ranked


def test_only_variants_that_let_layers_stay_in_float_and_were_timed_count():
    assert slower_than_fp32([_row(1.7), _row(0.8, layers=False)])["ratio"] == 1.7  # no float layers under the fast one
    assert slower_than_fp32([_row(1.7), {"options": {"t": 1}, "layers": True, "failed": "no build"}])["ratio"] == 1.7
    assert slower_than_fp32([{"options": {}, "layers": True, "error": 0.1, "ms": 3.0}]) is None  # not timed in turn
    assert slower_than_fp32([]) is None
    cached = _row(1.1) | {"ratio_ci": None}  # a row cached before intervals were kept: its ratio is its top
    assert slower_than_fp32([cached]) is cached and slower_than_fp32([_row(0.9) | {"ratio_ci": None}]) is None
