"""The Pareto chart (tuner.report.charts.pareto_figure) on studies made in memory: the error axis,
the requirement line and the markers."""
import math

import pytest
from memory_studies import stats, two_objective_study, winner

from tuner.report import pareto_figure


def _trace(fig, role):
    found = [t for t in fig.data if (t.meta or {}).get("role") == role]
    assert len(found) == 1, role
    return fig.data.index(found[0]), found[0]


def test_the_error_axis_has_plain_scientific_ticks_and_a_zero_line():
    study = two_objective_study([(5.0, 0.0, True), (3.0, 2e-5, False), (2.5, 3e-3, False)], require="cos<=0.005")
    fig = pareto_figure(study)
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis.exponentformat == "power"
    assert fig.layout.yaxis.ticktext[0] == "0" and fig.layout.yaxis.tickvals[0] == pytest.approx(2e-6)
    assert list(fig.layout.yaxis.ticktext[1:]) == ["10<sup>-5</sup>", "10<sup>-4</sup>", "10<sup>-3</sup>", "10<sup>-2</sup>"]
    _, base = _trace(fig, "baseline")
    assert base.y[0] == pytest.approx(2e-6)  # the exact zero, on the line labelled 0
    assert any("exact zeros" in a.text for a in fig.layout.annotations)


def test_a_requirement_of_zero_is_drawn_on_a_log_axis():
    study = two_objective_study([(5.0, 0.0, True), (3.0, 1e-6, False), (2.0, 1e-3, False)], require="cos<=0")
    fig = pareto_figure(study)
    _, req = _trace(fig, "requirement")
    assert fig.layout.yaxis.type == "log"
    assert req.y[0] > 0 and math.isfinite(req.y[0]) and req.y[0] == fig.layout.yaxis.tickvals[0]
    assert req.name == "requirement cos<=0"


def test_the_winner_marker_does_not_hide_the_baseline():
    finalists = [{"trial": 0, "baseline": True, "feasible": True} | stats(5.0, 0.05)]
    study = two_objective_study([(5.0, 0.0, True), (6.0, 1e-3, False)], winner=winner(finalists, 0))
    fig = pareto_figure(study)
    wi, w = _trace(fig, "winner")
    bi, b = _trace(fig, "baseline")
    assert (w.x[0], w.y[0]) == (b.x[0], b.y[0])  # the defaults won: one point, two markers
    assert bi > wi and b.marker.symbol.endswith("-open") and b.marker.size > w.marker.size
