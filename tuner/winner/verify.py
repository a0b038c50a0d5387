"""`tuner verify`: the winner (the exported engine, or its config rebuilt) re-timed against the backend's
defaults, each engine in a fresh process of its own: in paired blocks, then each alone in several fresh
processes (the deployment check), beside the study's own claim."""
from __future__ import annotations

import time

import optuna

from ..errors import UserError
from ..execute.jobs import Evaluator
from ..measure.latency import LatencyProtocol
from ..problem.spec import Problem
from ..report.as_run import deployed_text, workload_lines
from ..search.record import WINNER_ATTR, StoredStudy, StoredTrial
from ..search.trials import baseline_trial
from .select import agrees_with_claim

VERIFY_PROTOCOL = LatencyProtocol(max_seconds=30.0, rel_ci=0.01, max_runs=2000)


def verify_winner(study: optuna.Study, problem: Problem, engine_dir: str | None = None, backend: str | None = None,
                  timeout_s: float = 1800.0) -> dict:
    """Re-time the winner (the exported engine in engine_dir, else its config rebuilt) against the
    backend's defaults in a fresh process, in paired blocks; store and return both figures with the
    study's own claim, and how far apart they are."""
    won = StoredStudy.of(study).winner
    if won is None:
        raise UserError(f"study {study.study_name!r} has no confirmed winner to verify; run `tuner select --study "
                        f"{study.study_name}` first")
    base = baseline_trial(study)
    if base is None:
        raise UserError(f"study {study.study_name!r} has no baseline trial to compare the winner with")
    with Evaluator(problem.loaded, timeout_s) as evaluator:
        got = evaluator.verify(won.config, StoredTrial.of(base).config, engine_dir, backend, VERIFY_PROTOCOL)
    rel = got.relative
    result = {"speedup": 1.0 / rel.ratio, "speedup_low": 1.0 / rel.ci_high, "speedup_high": 1.0 / rel.ci_low,
              "winner_ms": got.latency.median_ms, "defaults_ms": got.baseline_latency.median_ms,
              "claimed_speedup": won.speedup, "busy": got.load["busy"], "load": got.load,
              "metrics": got.metrics, "meets_requirement": bool(got.feasible), "rounds": rel.rounds,
              "engine": engine_dir or "rebuilt from the winner's config", "verified_at": time.time(),
              "processes": got.processes, "workload": got.workload}
    if got.alone:
        result["alone"] = got.alone | {"agrees": agrees_with_claim(won.stored, got.alone)}
    if won.speedup:
        result["difference"] = result["speedup"] / won.speedup - 1.0
    study.set_user_attr(WINNER_ATTR, won.stored | {"verify": result})
    return result


def verify_lines(result: dict) -> list[str]:
    """What `tuner verify` (and export) prints: both figures and how far apart they are."""
    lines = [f"verify: winner {result['winner_ms']:.2f} ms, defaults {result['defaults_ms']:.2f} ms, timed in paired "
             f"blocks, each in a fresh process: {result['speedup']:.2f}x [95% {result['speedup_low']:.2f}-"
             f"{result['speedup_high']:.2f}] over {result['rounds']} rounds"
             + (" (the weighted mean over the workload's sets of shapes)" if result.get("workload") else "")]
    lines += workload_lines(result.get("workload"))
    if result.get("claimed_speedup"):
        lines.append(f"the study claimed {result['claimed_speedup']:.2f}x: verify reads {100 * result['difference']:+.1f}%"
                     + (" (within 3%)" if abs(result["difference"]) <= 0.03 else " (more than 3% apart)"))
    if result.get("alone"):
        lines.append(f"verify: {deployed_text(result['alone'], result.get('claimed_speedup'))}")
    if result["busy"]:
        lines.append(f"warning: other processes used {result['load']['other_cores']:.1f} cores during the timing; "
                     "run tuner verify again on a quiet machine")
    if not result["meets_requirement"]:
        lines.append("warning: the engine verified does NOT meet the requirement")
    return lines
