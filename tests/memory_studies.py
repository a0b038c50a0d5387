"""Studies and winners made in memory as `tune` leaves them (no engine is built): for the unit tests
of what the user is shown (tests/unit/report/)."""
from __future__ import annotations

import optuna


def stats(median, half_ci, p10=None, p90=None) -> dict:
    """A latency summary as the timing stores it: the median and its 95% CI of +-half_ci."""
    return {"median_ms": median, "p10_ms": p10 or median * 0.95, "p90_ms": p90 or median * 1.05, "mean_ms": median,
            "std_ms": 0.1, "count": 90, "ci_low_ms": median - half_ci, "ci_high_ms": median + half_ci, "converged": True}


def winner(finalists: list[dict], trial: int) -> dict:
    """The study's winner attr with `trial` among the finalists timed side by side."""
    own = next(f for f in finalists if f["trial"] == trial)
    base = next((f for f in finalists if f["baseline"]), None)
    return {"trial": trial, "config": {"precision": "int8-dynamic"},
            "confirmed_latency": {k: own[k] for k in own if k.endswith("_ms")},
            "confirmed_metrics": {"cos": 1e-4}, "requirement": "cos<=0.005", "baseline_latency": base,
            "speedup": base["median_ms"] / own["median_ms"] if base else None, "finalists": finalists}


def two_objective_study(trials, require="cos<=0.005", winner=None, notes=()) -> optuna.Study:
    """A two-objective study as tune leaves it: (latency, error, baseline?) per trial."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(directions=["minimize", "minimize"])
    study.set_user_attr("tuner_settings", {"require": require, "notes": list(notes), "objectives": "latency,error"})
    bound = require.split(",")[0]
    limit = float(bound.split("<=")[1])
    for lat, err, base in trials:
        t = study.ask()
        t.set_user_attr("config", {"precision": "fp32" if base else "int8-dynamic"})
        t.set_user_attr("latency", stats(lat, 0.05))
        t.set_user_attr("metrics", {"cos": err})
        if base:
            t.set_user_attr("baseline", True)
        t.set_constraint(bound, err - limit)
        study.tell(t, [lat, err])
    if winner is not None:
        study.set_user_attr("winner", winner)
    return study
