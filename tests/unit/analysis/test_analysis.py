"""When the analysis ranks no layer because every variant is clearly slower than fp32 (tuner.analysis.rankings)."""
from tuner.analysis.rankings import NOT_FASTER, slower_than_fp32


def _row(ratio, layers=True):
    return {"options": {}, "layers": layers, "error": 0.1, "ms": 2.0 * ratio, "ratio": ratio, "feasible": False}


def test_layers_are_not_ranked_when_the_fastest_variant_is_clearly_slower_than_fp32():
    assert slower_than_fp32([_row(1.7), _row(1.4)]) == 1.4  # OpenVINO int8 without VNNI: both slower
    assert slower_than_fp32([_row(1.7), _row(0.8)]) is None  # one variant gains: its layers are ranked
    assert slower_than_fp32([_row(NOT_FASTER)]) is None  # the margin itself still ranks
    assert slower_than_fp32([_row(NOT_FASTER + 0.01)]) == NOT_FASTER + 0.01


def test_only_variants_that_let_layers_stay_in_float_and_were_timed_count():
    assert slower_than_fp32([_row(1.7), _row(0.8, layers=False)]) == 1.7  # no float layers under the fast one
    assert slower_than_fp32([_row(1.7), {"options": {"t": 1}, "layers": True, "failed": "no build"}]) == 1.7
    assert slower_than_fp32([{"options": {}, "layers": True, "error": 0.1, "ms": 3.0}]) is None  # not timed in turn
    assert slower_than_fp32([]) is None
