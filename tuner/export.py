"""`tuner export`: rebuild the study's winner (or, asked for, its best-effort candidate) through the
isolated evaluator, check its accuracy again, and write the engine, config.json and report.json into a
new folder (tuner.export_files: staged, then moved into place)."""
from __future__ import annotations

import json
import os

import optuna

from . import __version__
from .errors import UserError
from .export_files import check_out_dir, install, staging_dir
from .jobs import Evaluator
from .problem import Problem
from .winner import BEST_EFFORT_ATTR, WINNER_ATTR


def export_winner(study: optuna.Study, problem: Problem, out_dir: str, best_effort: bool = False,
                  timeout_s: float = 1800.0, force: bool = False) -> dict:
    """Rebuild the winner (or, with best_effort, the closest candidate) into out_dir with config.json and
    report.json. out_dir must be new or empty; with force, only what an earlier export wrote is replaced."""
    chosen = study.user_attrs.get(WINNER_ATTR)
    kind = "winner"
    if not chosen:
        if not best_effort:
            hint = " (it has a best-effort candidate: add --best-effort)" if study.user_attrs.get(BEST_EFFORT_ATTR) else ""
            raise UserError(f"study {study.study_name!r} has no confirmed winner{hint}; "
                            f"run `tuner select --study {study.study_name}` first")
        chosen = study.user_attrs.get(BEST_EFFORT_ATTR)
        kind = "best-effort (does not meet the requirement)"
        if not chosen:
            raise UserError(f"study {study.study_name!r} has no completed trial to export")
    check_out_dir(out_dir, force)
    with staging_dir(out_dir) as staging:
        with Evaluator(problem.spec, timeout_s, study=study.study_name) as evaluator:
            built = evaluator.export(chosen["config"], os.path.join(staging, "engine"))
        report = _export_report(study, problem, chosen, kind, built, staging, out_dir)
        with open(os.path.join(staging, "config.json"), "w") as f:
            json.dump(chosen["config"], f, indent=2, sort_keys=True)
        with open(os.path.join(staging, "report.json"), "w") as f:
            json.dump(report, f, indent=2, default=str)
        install(out_dir, staging, {"written_by": f"tuner export (engine-tuner {__version__})",
                                   "study": study.study_name, "trial": chosen["trial"]})
    return report


def _export_report(study: optuna.Study, problem: Problem, chosen: dict, kind: str, built: dict, staging: str,
                   out_dir: str) -> dict:
    """report.json: what was exported, how to run it, and whether the rebuilt engine meets the requirement."""
    metrics, per_output = built["metrics"], built["per_output"]
    stored = chosen.get("confirmed_metrics") or chosen.get("metrics") or {}
    primary = problem.requirement.primary_metric
    report = {
        "kind": kind,
        "study": study.study_name,
        "trial": chosen["trial"],
        "config": chosen["config"],
        "backend": built["backend"],
        "engine": os.path.relpath(built["engine"], staging),
        # the lines of Python that load and run it with the backend's own library, at its final place
        "usage": built["usage"].replace(os.path.join(staging, "engine"), os.path.join(out_dir, "engine")),
        "requirement": str(problem.requirement),
        "meets_requirement": problem.requirement.holds(metrics),
        "metrics": metrics,
        "per_output": per_output,
        "stored_metrics": stored,
        "rebuilt_matches_stored": _close(metrics.get(primary), stored.get(primary)),
        "latency": chosen.get("confirmed_latency") or chosen.get("latency"),
        "baseline_latency": chosen.get("baseline_latency"),
        "speedup_vs_baseline": chosen.get("speedup"),
        "engine_tuner": __version__,
    }
    return report


def _close(a, b, rel: float = 0.05) -> bool:
    """The rebuild reproduces the stored error (same build, same data: equal up to kernel noise)."""
    if a is None or b is None:
        return False
    return abs(a - b) <= rel * max(abs(a), abs(b)) + 1e-9
