"""The one-pass sensitivity's arithmetic and its confirming builds (tuner.analysis.sensitivity), on a fake
evaluator whose builds meet the requirement exactly when given layers stay in float: which sets are built, in
what order, and what is kept. Nothing is built."""
import math
from types import SimpleNamespace

import pytest

from tuner.analysis.sensitivity import added_error, confirmed_float_set, drop_back
from tuner.execute.results import QuickCheck
from tuner.measure.requirement import Requirement

ORDER = ["a", "c", "b", "d", "e", "f", "g", "h"]  # as the activations ranked them
TABLE = {"entries": [{"name": n, "nodes": [f"{n}/MatMul"]} for n in ORDER], "override": "keep_float",
         "config_key": "keep_float"}


class Evaluator:
    """A build meets cos<=0.01 exactly when every node of `needed` stays in float; records each set built."""

    def __init__(self, needed: set[str]):
        self.needed, self.built = {f"{n}/MatMul" for n in needed}, []

    def accuracy(self, config, timing=None):
        kept = set(config["keep_float"])
        self.built.append(sorted(k.split("/")[0] for k in kept))
        return QuickCheck({"cos": 0.001 if self.needed <= kept else 0.5}, feasible=False)  # judged by the caller


def _problem(tag: str):
    # a model hash of its own per test: the builds' cache (TUNER_CACHE, per test session) never answers for another
    return SimpleNamespace(model_hash=tag, data_hash="d", requirement=Requirement.parse("cos<=0.01"),
                           backend_name=lambda config: "onnxruntime")


def test_doubling_then_bisection_then_dropping_back(request):
    ev = Evaluator({"a", "b"})
    kept, builds = confirmed_float_set(_problem(request.node.name), {"precision": "int8-dynamic"}, TABLE, ev)
    assert kept == ["a", "b"] and builds == 6
    assert ev.built == [["a"], ["a", "c"], ["a", "b", "c", "d"],  # k = 1, 2, 4: the first that holds
                        ["a", "b", "c"],  # bisection: 3 holds too
                        ["a", "b"], ["b"]]  # dropped back, least sensitive first: b stays ({a, c} failed), c goes


def test_nothing_kept_when_every_layer_in_float_still_fails(request):
    ev = Evaluator({"a", "missing"})
    assert confirmed_float_set(_problem(request.node.name), {"precision": "int8-dynamic"}, TABLE, ev) == (None, 4)
    assert ev.built[-1] == sorted(ORDER)  # k = 1, 2, 4, then all 8


def test_a_budget_spent_before_any_set_holds_keeps_nothing(request):
    ev = Evaluator({"h"})
    assert confirmed_float_set(_problem(request.node.name), {"precision": "int8-dynamic"}, TABLE, ev, budget=2) == (None, 2)


def test_dropping_back_repeats_until_a_pass_drops_nothing():
    # x is needed; q may go only once p has gone (errors that cancel), and q is tried first
    def holds(names):
        asked.append(sorted(names))
        return "x" in names and ("q" in names or "p" not in names)

    asked = []
    assert drop_back(["x", "p", "q"], holds) == ["x"]
    assert asked == [["p", "x"], ["q", "x"], ["q"],  # first pass: q stays, p goes, x stays
                     ["x"]]  # second pass: q goes now, and x is left alone (nothing kept is no float set)


def test_dropping_back_stops_where_the_budget_does():
    answers = iter([True, None])
    assert drop_back(["x", "p", "q"], lambda names: next(answers)) == ["x", "p"]  # q went, then the budget ended


def test_the_error_a_layer_adds_is_its_output_s_beyond_its_inputs_in_quadrature():
    assert added_error(0.5, []) == 0.5  # fed by the model's inputs: every bit of its error is its own
    assert added_error(0.5, [0.3]) == pytest.approx(0.4)
    assert added_error(0.5, [0.3, 0.4]) == 0.0  # a product of two noisy inputs: nothing added
    assert added_error(0.2, [0.3]) == 0.0  # an output cleaner than its input adds nothing
    assert added_error(math.sqrt(0.5), [0.5, 0.5]) == pytest.approx(0.0, abs=1e-6)
