"""Ties within noise go to the simplest finalist: the choice on plain dicts, the count of choices off the
defaults, and the tie line that says so (no engine is built)."""
from tuner.inputs.space import load_space
from tuner.report.finalists import finalist_rows
from tuner.search.record import Winner
from tuner.winner.select import choices_off_defaults, simplest_among_ties


def _f(trial, ratio, half, choices):
    return {"trial": trial, "relative": {"ratio": ratio, "ci_low": ratio - half, "ci_high": ratio + half},
            "choices": choices}


def test_the_simplest_of_the_finalists_that_tie_the_fastest_wins():
    fastest, simpler, baseline = _f(7, 0.80, 0.03, 6), _f(12, 0.82, 0.03, 2), _f(0, 1.0, 0.0, 0)
    winner, tied = simplest_among_ties([fastest, simpler, baseline])
    assert winner["trial"] == 12 and [f["trial"] for f in tied] == [7]  # the baseline is clearly slower
    # the defaults themselves win a tie with a tuned config
    winner, tied = simplest_among_ties([_f(3, 0.97, 0.04, 4), _f(0, 1.0, 0.0, 0)])
    assert winner["trial"] == 0 and [f["trial"] for f in tied] == [3]
    # a simpler finalist that read slower than the baseline does not win, however wide its interval
    winner, tied = simplest_among_ties([_f(3, 0.95, 0.02, 4), _f(8, 1.02, 0.1, 1), _f(0, 1.0, 0.0, 0)])
    assert winner["trial"] == 3 and tied == []


def test_no_tie_keeps_the_fastest_and_equal_simplicity_keeps_the_faster():
    winner, tied = simplest_among_ties([_f(7, 0.70, 0.02, 9), _f(12, 0.80, 0.02, 1), _f(0, 1.0, 0.0, 0)])
    assert winner["trial"] == 7 and tied == []
    winner, tied = simplest_among_ties([_f(5, 0.81, 0.03, 2), _f(6, 0.80, 0.03, 2)])
    assert winner["trial"] == 6 and [f["trial"] for f in tied] == [5]
    # overlap with the fastest is what ties: a finalist that overlaps only the simpler one does not take part
    winner, tied = simplest_among_ties([_f(1, 0.80, 0.01, 5), _f(2, 0.815, 0.01, 3), _f(3, 0.835, 0.01, 0)])
    assert winner["trial"] == 2 and [f["trial"] for f in tied] == [1]


SPACE = """\
name: s
backend: onnxruntime
parameters:
  precision: {type: categorical, choices: [fp32, int8-dynamic], default: fp32}
  intra_op_num_threads: {type: int, low: 1, high: 4, default: 4}
  dyn_per_channel: {type: bool, default: false, when: {precision: [int8-dynamic]}}
layer_overrides:
  keep_float: {when: {precision: [int8-dynamic]}, op_types: [MatMul], encoding: sensitivity}
"""


def test_choices_count_the_parameters_off_their_default_and_the_layers_kept_in_float(tmp_path):
    (tmp_path / "s.yaml").write_text(SPACE)
    space = load_space(str(tmp_path / "s.yaml"))
    assert choices_off_defaults({"precision": "fp32", "intra_op_num_threads": 4}, {"precision": "fp32"}, space) == 0
    params = {"precision": "int8-dynamic", "intra_op_num_threads": 4, "dyn_per_channel": False, "keep_float/top_k": 3}
    config = {"precision": "int8-dynamic", "keep_float": ["a", "b", "c"]}
    assert choices_off_defaults(params, config, space) == 1 + 3  # the route, three layers in float (top_k not again)
    assert choices_off_defaults(params | {"intra_op_num_threads": 2}, config | {"keep_float": []}, space) == 2


def _stats(median):
    return {"median_ms": median, "p10_ms": median * 0.95, "p90_ms": median * 1.05, "ci_low_ms": median - 0.05,
            "ci_high_ms": median + 0.05}


def test_the_tie_line_says_the_simplest_won():
    finalists = [{"trial": 7, "baseline": False, "feasible": True, "choices": 6,
                  "relative": {"ratio": 0.80, "ci_low": 0.77, "ci_high": 0.83}} | _stats(3.2),
                 {"trial": 12, "baseline": False, "feasible": True, "choices": 2,
                  "relative": {"ratio": 0.82, "ci_low": 0.79, "ci_high": 0.85}} | _stats(3.3),
                 {"trial": 0, "baseline": True, "feasible": True, "choices": 0,
                  "relative": {"ratio": 1.0, "ci_low": 1.0, "ci_high": 1.0}} | _stats(4.0)]
    winner = {"trial": 12, "finalists": finalists, "tie": {"fastest": 7, "trials": [7]}}
    tie = [text for label, text in finalist_rows(Winner.from_attrs(winner)) if label == "tie"]
    assert len(tie) == 1
    assert ("trial 12 ties trial 7 within noise" in tie[0] and "trial 7 read fastest" in tie[0]
            and "the simplest of them wins, with 2 choices off the defaults (trial 7: 6)" in tie[0]), tie
    assert not any(label == "tie" for label, _ in finalist_rows(Winner.from_attrs(winner | {"tie": None})))


def test_intervals_that_touch_tie():
    fastest = {"trial": 7, "relative": {"ratio": 0.50, "ci_low": 0.45, "ci_high": 0.55}, "choices": 6}
    touching = {"trial": 9, "relative": {"ratio": 0.60, "ci_low": 0.55, "ci_high": 0.65}, "choices": 1}
    winner, tied = simplest_among_ties([fastest, touching])
    assert winner["trial"] == 9 and [f["trial"] for f in tied] == [7]
