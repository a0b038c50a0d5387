"""Confirm the winner: rebuild the top feasible candidates and the baseline, check their accuracy
again, time them interleaved (A B C A B C ...) in one process so their ratios compare, and store
the fastest confirmed one in the study. Export writes it out."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time

import optuna
from optuna.trial import TrialState

from . import __version__
from .errors import UserError
from .backends.onnxruntime import adapt_feed
from .evaluate import Problem, build_candidate, check_accuracy
from .lock import default_lock_path, device_lock
from .measure.latency import summarize
from .study import baseline_trial, closest_candidate, is_feasible, latency_of

WINNER_ATTR = "winner"
BEST_EFFORT_ATTR = "best_effort"


def top_candidates(study: optuna.Study, k: int) -> list:
    """The k fastest feasible trials, one per distinct build."""
    seen, out = set(), []
    feasible = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if is_feasible(t)]
    for t in sorted(feasible, key=latency_of):
        key = t.user_attrs.get("build_key")
        if key in seen:
            continue
        seen.add(key)
        out.append(t)
        if len(out) == k:
            break
    return out


def time_interleaved(sessions: list, feed: dict, rounds: int = 30, per_round: int = 3, warmup: int = 3,
                     max_seconds: float = 60.0) -> list[list[float]]:
    """Samples (ms) per session, taken round-robin so drift on a shared machine hits all alike.
    Build the sessions with interleaved=True (see make_session), or idle ones slow the timed one."""
    feeds = [adapt_feed(s, feed) for s in sessions]
    for s, f in zip(sessions, feeds):
        for _ in range(warmup):
            s.run(None, f)
    samples: list[list[float]] = [[] for _ in sessions]
    start = time.perf_counter()
    for r in range(rounds):
        for i, s in enumerate(sessions):
            s.run(None, feeds[i])  # untimed: refills the caches the previous engine evicted
            for _ in range(per_round):
                t0 = time.perf_counter()
                s.run(None, feeds[i])
                samples[i].append((time.perf_counter() - t0) * 1e3)
        if r >= 2 and time.perf_counter() - start > max_seconds:
            break
    return samples


def select_winner(study: optuna.Study, problem: Problem, top_k: int = 3, rounds: int = 30) -> dict | None:
    """Store and return the confirmed winner; with nothing feasible, store the closest candidate instead."""
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
    with tempfile.TemporaryDirectory(prefix="tuner-select-") as tmp:
        built = []
        for t in entries:
            cand = build_candidate(problem, t.user_attrs["config"], os.path.join(tmp, f"trial-{t.number}"),
                                   interleaved=True)
            metrics, _ = check_accuracy(problem, cand.session)
            built.append((t, cand, metrics))
        with device_lock(default_lock_path("cpu")):
            samples = time_interleaved([c.session for _, c, _ in built], problem.batches[0], rounds=rounds)
    stats = {t.number: summarize(s, converged=True).to_dict() for (t, _, _), s in zip(built, samples)}
    base_ms = stats[base.number]["median_ms"] if base is not None else None
    confirmed = [(t, m) for t, _, m in built if t in cands and problem.requirement.holds(m)]
    rejected = [t.number for t, _, m in built if t in cands and not problem.requirement.holds(m)]
    if not confirmed:
        study.set_user_attr(WINNER_ATTR, None)
        study.set_user_attr(BEST_EFFORT_ATTR, _summary(cands[0]) | {"note": "failed the accuracy re-check"})
        return None
    t, metrics = min(confirmed, key=lambda tm: stats[tm[0].number]["median_ms"])
    s = stats[t.number]
    winner = _summary(t) | {
        "confirmed_latency": s,
        "confirmed_metrics": metrics,
        "baseline_trial": base.number if base is not None else None,
        "baseline_latency": stats[base.number] if base is not None else None,
        "speedup": base_ms / s["median_ms"] if base_ms else None,
        "requirement": str(problem.requirement),
        "compared": {str(n): v["median_ms"] for n, v in stats.items()},
        "rejected_on_recheck": rejected,
        "selected_at": time.time(),
    }
    study.set_user_attr(WINNER_ATTR, winner)
    return winner


def _summary(t) -> dict:
    return {"trial": t.number, "config": t.user_attrs.get("config"), "build_key": t.user_attrs.get("build_key"),
            "latency": t.user_attrs.get("latency"), "metrics": t.user_attrs.get("metrics"),
            "violations": t.user_attrs.get("violations"), "feasible": is_feasible(t)}


def export_winner(study: optuna.Study, problem: Problem, out_dir: str, best_effort: bool = False) -> dict:
    """Rebuild the winner (or, with best_effort, the closest candidate) into out_dir with config.json and report.json."""
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
    engine_dir = os.path.join(out_dir, "engine")
    shutil.rmtree(engine_dir, ignore_errors=True)
    cand = build_candidate(problem, chosen["config"], engine_dir)
    metrics, per_output = check_accuracy(problem, cand.session)
    stored = chosen.get("confirmed_metrics") or chosen.get("metrics") or {}
    primary = problem.requirement.primary_metric
    report = {
        "kind": kind,
        "study": study.study_name,
        "trial": chosen["trial"],
        "config": chosen["config"],
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
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(chosen["config"], f, indent=2, sort_keys=True)
    with open(os.path.join(out_dir, "report.json"), "w") as f:
        json.dump(report, f, indent=2, default=str)
    return report


def _close(a, b, rel: float = 0.05) -> bool:
    """The rebuild reproduces the stored error (same build, same data: equal up to kernel noise)."""
    if a is None or b is None:
        return False
    return abs(a - b) <= rel * max(abs(a), abs(b)) + 1e-9
