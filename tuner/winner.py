"""The winner: rebuild the top feasible candidates and the baseline, check their accuracy again, time
them side by side (A B C A B C ..., in blocks) in one process so their ratios compare, and store the
fastest confirmed one in the study; among finalists that tie it within noise, the simplest (fewest
choices off the defaults). Export rebuilds it and writes it out. Both build through the
isolated evaluator."""
from __future__ import annotations

import json
import os
import time

import optuna
from optuna.trial import TrialState

from . import __version__
from .errors import UserError
from .evaluate import Evaluator
from .export_files import check_out_dir, install, staging_dir
from .measure.latency import LatencyProtocol
from .problem import Problem
from .record import BUILD_KEY, CONFIG
from .search.trials import baseline_trial, closest_candidate, is_feasible, is_trusted, speed_key
from .space import Space

WINNER_ATTR = "winner"
BEST_EFFORT_ATTR = "best_effort"


def top_candidates(study: optuna.Study, k: int) -> list:
    """The k fastest feasible trials, one per distinct build."""
    seen, out = set(), []
    feasible = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if is_feasible(t) and is_trusted(t)]
    for t in sorted(feasible, key=speed_key):
        key = t.user_attrs.get("build_key")
        if key in seen:
            continue
        seen.add(key)
        out.append(t)
        if len(out) == k:
            break
    return out


def select_winner(study: optuna.Study, problem: Problem, top_k: int = 3, rounds: int = 30,
                  timeout_s: float = 1800.0) -> dict | None:
    """Store and return the confirmed winner; with nothing feasible, store the closest candidate instead.
    Raises TrialFailure when the side-by-side job itself dies (nothing is stored then)."""
    cands = top_candidates(study, top_k)
    base = baseline_trial(study)
    if not cands:
        closest = closest_candidate(study)
        if closest is not None:
            study.set_user_attr(BEST_EFFORT_ATTR, _summary(closest))
        study.set_user_attr(WINNER_ATTR, None)
        return None
    # The baseline always runs in the comparison: it gives the speedup, and, being feasible in
    # nearly every study, it guarantees the winner is never slower than the default.
    if base is not None and is_feasible(base) and base not in cands:
        cands.append(base)
    entries = cands + ([base] if base is not None and base not in cands else [])
    reference = entries.index(base) if base is not None else 0  # what the speedups are measured against
    with Evaluator(problem.spec, timeout_s, study=study.study_name) as evaluator:
        confirmed_run = evaluator.confirm([t.user_attrs[CONFIG] for t in entries], reference, rounds=rounds)
    results = confirmed_run["results"]
    built = [(t, r) for t, r in zip(entries, results) if "error" not in r]
    stats = {t.number: r["latency"] for t, r in built}
    ratio = {t.number: r["relative"] for t, r in built}
    confirmed = [(t, r["metrics"]) for t, r in built if t in cands and r["feasible"]]
    rejected = [t.number for t, r in zip(entries, results) if t in cands and not r.get("feasible")]
    if not confirmed:
        study.set_user_attr(WINNER_ATTR, None)
        study.set_user_attr(BEST_EFFORT_ATTR, _summary(cands[0]) | {"note": "failed the accuracy re-check"})
        return None
    choices = {f.number: choices_off_defaults(f.params, f.user_attrs.get(CONFIG) or {}, problem.space) for f, _ in confirmed}
    pick, tied = simplest_among_ties([{"trial": f.number, "relative": ratio[f.number], "choices": choices[f.number]}
                                      for f, _ in confirmed])
    t, metrics = next((f, m) for f, m in confirmed if f.number == pick["trial"])
    rel = ratio[t.number]
    winner = _summary(t) | {
        "confirmed_latency": stats[t.number],
        "confirmed_relative": rel,
        "confirmed_metrics": metrics,
        "baseline_trial": base.number if base is not None else None,
        "baseline_latency": stats.get(base.number) if base is not None else None,
        "speedup": 1.0 / rel["ratio"] if base is not None and base.number in stats else None,
        "speedup_interval": [1.0 / rel["ci_high"], 1.0 / rel["ci_low"]] if base is not None else None,
        "requirement": str(problem.requirement),
        "compared": {str(n): v["median_ms"] for n, v in stats.items()},
        # every finalist's side-by-side timing, for `tune`, `select` and the report (report/finalists.py)
        "finalists": sorted(({"trial": f.number, "baseline": base is not None and f.number == base.number,
                              "feasible": bool(r["feasible"]), "relative": ratio[f.number],
                              "choices": choices_off_defaults(f.params, f.user_attrs.get(CONFIG) or {}, problem.space)}
                             | stats[f.number] for f, r in built), key=lambda f: f["relative"]["ratio"]),
        # the finalists that tie the fastest within noise, of which the simplest won (simplest_among_ties)
        "tie": {"fastest": min(confirmed, key=lambda fm: ratio[fm[0].number]["ratio"])[0].number,
                "trials": [f["trial"] for f in tied]} if tied else None,
        "rejected_on_recheck": rejected,
        "load": confirmed_run["load"],
        "selected_at": time.time(),
    }
    study.set_user_attr(WINNER_ATTR, winner)
    return winner


def choices_off_defaults(params: dict, config: dict, space: Space) -> int:
    """How far a config is from the defaults: its parameters off their space default (per-layer ones
    not counted here) plus the layers it keeps in float (the nodes of its keep-in-float lists)."""
    defaults = {p.name: p.default for p in space.params}
    off = sum(1 for name, value in params.items() if name in defaults and value != defaults[name])
    return off + sum(len(config.get(key) or []) for key in {o.key for o in space.overrides})


def _overlap(a: dict, b: dict) -> bool:
    return a["ci_low"] <= b["ci_high"] and b["ci_low"] <= a["ci_high"]


def simplest_among_ties(finalists: list[dict]) -> tuple[dict, list[dict]]:
    """(the winner, the others it tied with) among the confirmed finalists, each {"trial", "relative":
    {"ratio", "ci_low", "ci_high"}, "choices"}: the fastest by ratio to the baseline, and every finalist
    whose 95% interval overlaps the fastest's ties it within noise; of those the one with the fewest
    choices off the defaults wins (then the lower ratio). A faster figure inside the noise is no reason
    for a config that is harder to explain and to keep. A finalist that read slower than the baseline
    (ratio over 1) never wins over a faster one: the winner is never slower than the defaults."""
    fastest = min(finalists, key=lambda f: f["relative"]["ratio"])
    tied = [f for f in finalists if _overlap(f["relative"], fastest["relative"])
            and f["relative"]["ratio"] <= max(1.0, fastest["relative"]["ratio"])]
    winner = min(tied, key=lambda f: (f["choices"], f["relative"]["ratio"]))
    return winner, [f for f in tied if f is not winner]


def _summary(t) -> dict:
    return {"trial": t.number, "config": t.user_attrs.get(CONFIG), "build_key": t.user_attrs.get(BUILD_KEY),
            "latency": t.user_attrs.get("latency"), "metrics": t.user_attrs.get("metrics"),
            "violations": t.user_attrs.get("violations"), "feasible": is_feasible(t)}


def export_winner(study: optuna.Study, problem: Problem, out_dir: str, best_effort: bool = False,
                  timeout_s: float = 1800.0, force: bool = False) -> dict:
    """Rebuild the winner (or, with best_effort, the closest candidate) into out_dir with config.json and
    report.json. out_dir must be new or empty; with force, only what an earlier export wrote is replaced."""
    chosen = study.user_attrs.get(WINNER_ATTR)
    kind = "winner"
    if not chosen:
        if not best_effort:
            hint = " (it has a best-effort candidate: add --best-effort)" if study.user_attrs.get(BEST_EFFORT_ATTR) else ""
            raise UserError(f"study {study.study_name!r} has no confirmed winner{hint}; run `tuner select --study {study.study_name}` first")
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


VERIFY_PROTOCOL = LatencyProtocol(max_seconds=30.0, rel_ci=0.01, max_runs=2000)


def verify_winner(study: optuna.Study, problem: Problem, engine_dir: str | None = None, backend: str | None = None,
                  timeout_s: float = 1800.0) -> dict:
    """Re-time the winner (the exported engine in engine_dir, else its config rebuilt) against the
    backend's defaults in a fresh process, in paired blocks; store and return both figures with the
    study's own claim, and how far apart they are."""
    winner = study.user_attrs.get(WINNER_ATTR)
    if not winner:
        raise UserError(f"study {study.study_name!r} has no confirmed winner to verify; run `tuner select --study "
                        f"{study.study_name}` first")
    base = baseline_trial(study)
    if base is None:
        raise UserError(f"study {study.study_name!r} has no baseline trial to compare the winner with")
    with Evaluator(problem.spec, timeout_s) as evaluator:
        got = evaluator.verify(winner["config"], base.user_attrs[CONFIG], engine_dir, backend, VERIFY_PROTOCOL)
    rel = got["relative"]
    result = {"speedup": 1.0 / rel["ratio"], "speedup_low": 1.0 / rel["ci_high"], "speedup_high": 1.0 / rel["ci_low"],
              "winner_ms": got["latency"]["median_ms"], "defaults_ms": got["baseline_latency"]["median_ms"],
              "claimed_speedup": winner.get("speedup"), "busy": got["load"]["busy"], "load": got["load"],
              "metrics": got["metrics"], "meets_requirement": got["feasible"], "rounds": rel["rounds"],
              "engine": engine_dir or "rebuilt from the winner's config", "verified_at": time.time()}
    if winner.get("speedup"):
        result["difference"] = result["speedup"] / winner["speedup"] - 1.0
    study.set_user_attr(WINNER_ATTR, winner | {"verify": result})
    return result


def verify_lines(result: dict) -> list[str]:
    """What `tuner verify` (and export) prints: both figures and how far apart they are."""
    lines = [f"verify: winner {result['winner_ms']:.2f} ms, defaults {result['defaults_ms']:.2f} ms, timed in paired "
             f"blocks in a fresh process: {result['speedup']:.2f}x [95% {result['speedup_low']:.2f}-"
             f"{result['speedup_high']:.2f}] over {result['rounds']} rounds"]
    if result.get("claimed_speedup"):
        lines.append(f"the study claimed {result['claimed_speedup']:.2f}x: verify reads {100 * result['difference']:+.1f}%"
                     + (" (within 3%)" if abs(result["difference"]) <= 0.03 else " (more than 3% apart)"))
    if result["busy"]:
        lines.append(f"warning: other processes used {result['load']['other_cores']:.1f} cores during the timing; "
                     "run tuner verify again on a quiet machine")
    if not result["meets_requirement"]:
        lines.append("warning: the engine verified does NOT meet the requirement")
    return lines
