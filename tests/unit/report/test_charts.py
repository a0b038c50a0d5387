"""What the user is shown about timings and the winner, on studies made in memory (no engine is built):
convergence, the finalists side by side with ties, and the Pareto chart's axis and markers."""
import math

import numpy as np
import optuna
import pytest

from tuner.measure.latency import LatencyProtocol, is_converged, summarize
from tuner.report import pareto_figure, summary_rows
from tuner.report.finalists import finalist_lines
from tuner.run.tune import TuneResult, describe_result

optuna.logging.set_verbosity(optuna.logging.ERROR)


def test_a_timing_whose_runs_differ_5x_is_not_converged():
    # 19 ms and 96 ms runs around a tight middle: the median's CI is narrow, the runs are not.
    samples = [19.0] * 20 + list(np.linspace(49.9, 50.1, 60)) + [96.0] * 20
    stats = summarize(samples, converged=True)
    assert stats.p10_ms == pytest.approx(19.0) and stats.p90_ms == pytest.approx(96.0)
    assert stats.ci_high_ms - stats.ci_low_ms < 0.1
    assert not stats.converged
    assert not is_converged(samples, LatencyProtocol())
    steady = list(np.linspace(49.0, 51.0, 100))
    assert summarize(steady, converged=True).converged and is_converged(steady, LatencyProtocol())


def _stats(median, half_ci, p10=None, p90=None):
    return {"median_ms": median, "p10_ms": p10 or median * 0.95, "p90_ms": p90 or median * 1.05, "mean_ms": median,
            "std_ms": 0.1, "count": 90, "ci_low_ms": median - half_ci, "ci_high_ms": median + half_ci, "converged": True}


def _winner(finalists, trial):
    own = next(f for f in finalists if f["trial"] == trial)
    base = next((f for f in finalists if f["baseline"]), None)
    return {"trial": trial, "config": {"precision": "int8-dynamic"}, "confirmed_latency": {k: own[k] for k in own if k.endswith("_ms")},
            "confirmed_metrics": {"cos": 1e-4}, "requirement": "cos<=0.005", "baseline_latency": base,
            "speedup": base["median_ms"] / own["median_ms"] if base else None, "finalists": finalists}


def test_tune_and_select_show_the_finalists_and_a_tie_within_noise():
    finalists = [{"trial": 7, "baseline": False, "feasible": True} | _stats(3.20, 0.05),
                 {"trial": 12, "baseline": False, "feasible": True} | _stats(3.22, 0.05),
                 {"trial": 0, "baseline": True, "feasible": True} | _stats(3.60, 0.04),
                 {"trial": 4, "baseline": False, "feasible": False} | _stats(2.90, 0.04, 10.0, 96.0)]
    lines = describe_result(TuneResult(optuna.create_study(), _winner(finalists, 7), 0))
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
    finalists = [{"trial": 7, "baseline": False, "feasible": True} | _stats(3.00, 0.05),
                 {"trial": 0, "baseline": True, "feasible": True} | _stats(3.60, 0.05)]
    lines = finalist_lines(_winner(finalists, 7))
    assert len(lines) == 3 and not any(line.startswith("tie") for line in lines)
    finalists[1] = finalists[1] | _stats(3.04, 0.05)
    assert "(the baseline)" in finalist_lines(_winner(finalists, 7))[-1]


def _study(trials, require="cos<=0.005", winner=None, notes=()):
    """A two-objective study as tune leaves it: (latency, error, feasible, baseline) per trial."""
    study = optuna.create_study(directions=["minimize", "minimize"])
    study.set_user_attr("tuner_settings", {"require": require, "notes": list(notes), "objectives": "latency,error"})
    bound = require.split(",")[0]
    limit = float(bound.split("<=")[1])
    for i, (lat, err, base) in enumerate(trials):
        t = study.ask()
        t.set_user_attr("config", {"precision": "fp32" if base else "int8-dynamic"})
        t.set_user_attr("latency", _stats(lat, 0.05))
        t.set_user_attr("metrics", {"cos": err})
        if base:
            t.set_user_attr("baseline", True)
        t.set_constraint(bound, err - limit)
        study.tell(t, [lat, err])
    if winner is not None:
        study.set_user_attr("winner", winner)
    return study


def _trace(fig, role):
    found = [t for t in fig.data if (t.meta or {}).get("role") == role]
    assert len(found) == 1, role
    return fig.data.index(found[0]), found[0]


def test_the_error_axis_has_plain_scientific_ticks_and_a_zero_line():
    study = _study([(5.0, 0.0, True), (3.0, 2e-5, False), (2.5, 3e-3, False)], require="cos<=0.005")
    fig = pareto_figure(study)
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis.exponentformat == "power"
    assert fig.layout.yaxis.ticktext[0] == "0" and fig.layout.yaxis.tickvals[0] == pytest.approx(2e-6)
    assert list(fig.layout.yaxis.ticktext[1:]) == ["10<sup>-5</sup>", "10<sup>-4</sup>", "10<sup>-3</sup>", "10<sup>-2</sup>"]
    _, base = _trace(fig, "baseline")
    assert base.y[0] == pytest.approx(2e-6)  # the exact zero, on the line labelled 0
    assert any("exact zeros" in a.text for a in fig.layout.annotations)


def test_a_requirement_of_zero_is_drawn_on_a_log_axis():
    study = _study([(5.0, 0.0, True), (3.0, 1e-6, False), (2.0, 1e-3, False)], require="cos<=0")
    fig = pareto_figure(study)
    _, req = _trace(fig, "requirement")
    assert fig.layout.yaxis.type == "log"
    assert req.y[0] > 0 and math.isfinite(req.y[0]) and req.y[0] == fig.layout.yaxis.tickvals[0]
    assert req.name == "requirement cos<=0"


def test_the_winner_marker_does_not_hide_the_baseline():
    finalists = [{"trial": 0, "baseline": True, "feasible": True} | _stats(5.0, 0.05)]
    study = _study([(5.0, 0.0, True), (6.0, 1e-3, False)], winner=_winner(finalists, 0))
    fig = pareto_figure(study)
    wi, w = _trace(fig, "winner")
    bi, b = _trace(fig, "baseline")
    assert (w.x[0], w.y[0]) == (b.x[0], b.y[0])  # the defaults won: one point, two markers
    assert bi > wi and b.marker.symbol.endswith("-open") and b.marker.size > w.marker.size


def test_the_report_says_the_notes_and_the_finalists():
    finalists = [{"trial": 1, "baseline": False, "feasible": True} | _stats(3.0, 0.2),
                 {"trial": 0, "baseline": True, "feasible": True} | _stats(3.1, 0.2)]
    note = "no --require: every trial counts as feasible"
    rows = dict(summary_rows(_study([(3.1, 0.0, True), (3.0, 1e-3, False)], winner=_winner(finalists, 1),
                                    notes=[note])))
    assert rows["note"] == note
    assert rows["finalist trial 1"].startswith("3.000 ms, p10-p90") and "(winner)" in rows["finalist trial 1"]
    assert "ties trial 0 (the baseline) within noise" in rows["tie within noise"]
