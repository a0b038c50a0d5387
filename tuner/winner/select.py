"""The winner: rebuild the top feasible candidates and the baseline, check their accuracy again, time
them side by side (A B C A B C ..., in blocks), each in a process of its own, so their ratios compare, and
store the fastest confirmed one in the study; among finalists that tie it within noise, the simplest (fewest
choices off the defaults). Then the deployment check: the winner and the baseline each alone in several
fresh processes, as a user runs them; a winner slower than the baseline there, beyond the noise, is not
the winner. Built through the isolated evaluator; tuner.winner.export writes the winner out,
tuner.winner.verify re-times it against the defaults."""
from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import TrialState

from ..execute.jobs import Evaluator
from ..execute.results import Confirmation, Confirmed
from ..execute.timing import ALONE_PROCESSES, ALONE_SECONDS
from ..inputs.configs import defaults_chooser, normalize
from ..inputs.space import BACKEND, Space
from ..measure.latency import ci_overlap
from ..problem.spec import Problem
from ..search.choices import DEFAULT_KEEP_ARTIFACTS
from ..search.record import BEST_EFFORT_ATTR, WINNER_ATTR, StoredStudy, StoredTrial
from ..search.settings import readable_settings
from ..search.trials import baseline_trial, closest_candidate, is_feasible, is_trusted, speed_key
from ..store.artifacts import (
    SELECTION,
    StoreRef,
    drop_selection_engines,
    note,
    remember_store,
    selection_engines,
    stored_keep,
    upload_engine,
    upload_kept_engines,
)


def top_candidates(study: optuna.Study, k: int) -> list:
    """The k fastest feasible trials, one per distinct build."""
    seen, out = set(), []
    feasible = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if is_feasible(t) and is_trusted(t)]
    for t in sorted(feasible, key=speed_key):
        key = StoredTrial.of(t).build_key
        if key in seen:
            continue
        seen.add(key)
        out.append(t)
        if len(out) == k:
            break
    return out


def select_winner(study: optuna.Study, problem: Problem, top_k: int = 3, rounds: int = 30,
                  timeout_s: float = 1800.0, artifacts: str | None = None, keep: str | None = None,
                  alone_processes: int = ALONE_PROCESSES, alone_seconds: float = ALONE_SECONDS) -> dict | None:
    """Store and return the confirmed winner; with nothing feasible, store the closest candidate instead.
    The engines of the confirmed finalists, as timed side by side, go to the study's artifact store
    (tuner.store.artifacts; `artifacts`: --artifacts, else the stored or default one; keep: --keep-artifacts,
    None: as stored), the winner's record names its own. Raises TrialFailure when
    the side-by-side job itself dies (nothing is stored then). alone_processes: fresh processes per engine in
    the deployment check (0: none); alone_seconds: each one's timed seconds."""
    keep = keep or stored_keep(study) or DEFAULT_KEEP_ARTIFACTS
    store = remember_store(study, artifacts, keep)
    keep_all = keep == "all"
    if store is None:
        note(f"study {study.study_name!r} is in a database server and has no artifact store: the engines timed in "
             "selection are not kept and export will rebuild the winner (--artifacts DIR_OR_URL keeps them)")
    else:
        kept = {t.number: StoredTrial.of(t).engine_dir
                for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))}
        _upload(lambda: upload_kept_engines(study, store, kept), "uploading the kept trial engines")
    cands = top_candidates(study, top_k)
    base = baseline_trial(study)
    if not cands:
        closest = closest_candidate(study)
        if closest is not None:
            study.set_user_attr(BEST_EFFORT_ATTR, _summary(closest))
        study.set_user_attr(WINNER_ATTR, None)
        _drop_earlier(study, store, keep_all)
        return None
    # The baseline always runs in the comparison: it gives the speedup, and, being feasible in
    # nearly every study, it guarantees the winner is never slower than the default. So does each
    # installed runtime's own defaults config (a space over several backends): what a user would run
    # instead of tuning ("just use OpenVINO"); one measured feasible in the search may win as the baseline may.
    defaults = runtime_defaults(study, problem, base)
    if base is not None and is_feasible(base) and base not in cands:
        cands.append(base)
    for t, _ in defaults.values():
        if t is not None and t not in cands and is_feasible(t) and is_trusted(t):
            cands.append(t)
    entries = cands + ([base] if base is not None and base not in cands else [])
    entries += [t for t, _ in defaults.values() if t is not None and t not in entries]
    untried = [(name, config) for name, (t, config) in defaults.items() if t is None]  # no trial of them: built here
    reference = entries.index(base) if base is not None else 0  # what the speedups are measured against
    with tempfile.TemporaryDirectory(prefix="tuner-finalists-") as saved, \
            Evaluator(problem.loaded, timeout_s, study=study.study_name) as evaluator:
        confirmed_run = evaluator.confirm([StoredTrial.of(t).config for t in entries] + [c for _, c in untried],
                                          reference, rounds=rounds, save_dir=saved)
        winner = _decide(study, problem, cands, base, entries, confirmed_run)
        not_deployed: list[dict] = []
        while winner is not None and base is not None and winner["trial"] != base.number and alone_processes:
            deployed = _deployment_check(evaluator, winner, base, entries, confirmed_run.finalists, saved,
                                         alone_processes, alone_seconds)
            winner["deployed"] = deployed
            if deployed["speedup_high"] >= 1.0:
                break
            # slower than the baseline alone, beyond the noise: not the winner; the decision is made without it
            not_deployed.append({"trial": winner["trial"], "claimed_speedup": winner.get("speedup"), "deployed": deployed})
            cands = [t for t in cands if t.number != winner["trial"]]
            winner = _decide(study, problem, cands, base, entries, confirmed_run) if cands else None
        if winner is not None and not_deployed:
            winner["not_deployed"] = not_deployed
        if winner is not None:
            winner |= against_defaults(winner, defaults, entries, untried, confirmed_run.finalists)
        if winner is not None and store is not None:
            only = winner["trial"] if keep == "winner" else None
            uploaded = _upload(lambda: _upload_finalists(study, store, entries, confirmed_run.finalists, saved,
                                                         keep_all, only),
                               "uploading the finalists' engines (export will rebuild)") or {}
            winner["engine_artifact"] = _short(uploaded.get(winner["trial"]))
            for f in winner["finalists"]:
                f["engine_artifact"] = (uploaded.get(f["trial"]) or {}).get("id")
    study.set_user_attr(WINNER_ATTR, winner)
    if winner is None:
        _drop_earlier(study, store, keep_all)
    return winner


def _deployment_check(evaluator: Evaluator, winner: dict, base, entries: list, results: list[Confirmed], saved: str,
                      processes: int, seconds: float) -> dict:
    """The winner and the baseline, as selection saved them, each timed alone in `processes` fresh processes
    (timing.time_alone): the figure users compare with their own, with whether it agrees with the claim."""
    at = {t.number: i for i, t in enumerate(entries)}
    pair = [at[winner["trial"]], at[base.number]]
    winner_saved, base_saved = ((results[i].rebuilt.backend, os.path.join(saved, str(i))) for i in pair)
    deployed = evaluator.deployed((winner_saved, base_saved), results[pair[0]].rebuilt.device, processes, seconds)
    return deployed | {"agrees": agrees_with_claim(winner, deployed)}


def agrees_with_claim(winner: dict, deployed: dict) -> bool:
    """The side-by-side claim and the deployment check agree within their noise: their speedup intervals overlap."""
    low, high = winner.get("speedup_interval") or [winner.get("speedup"), winner.get("speedup")]
    return low is None or (low <= deployed["speedup_high"] and deployed["speedup_low"] <= high)


def runtime_defaults(study: optuna.Study, problem: Problem, base) -> dict[str, tuple[Any, dict]]:
    """Each installed backend of the space (the adapted space keeps only those) -> (the completed trial that
    measured its defaults, or None; its defaults config): the baseline for its own backend, else the trial
    with the config (every parameter at its default under that backend: the trial tuner.search.enqueue
    queued as "<backend> defaults")."""
    space = problem.space
    several = space.param(BACKEND) is not None
    rankings = readable_settings(StoredStudy.of(study).settings).rankings
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    out: dict[str, tuple[Any, dict]] = {}
    for name in space.backends:
        config = normalize(space, defaults_chooser({BACKEND: name} if several else {}), problem.graph_nodes, rankings)
        if base is not None and problem.backend_name(StoredTrial.of(base).config) == name:
            trial = base
        else:
            trial = next((t for t in done if (rec := StoredTrial.of(t)).has_config and rec.config == config), None)
        out[name] = (trial, (StoredTrial.of(trial).config or config) if trial is not None else config)
    return out


def against_defaults(winner: dict, defaults: dict[str, tuple[Any, dict]], entries: list,
                     untried: list[tuple[str, dict]], results: list[Confirmed]) -> dict:
    """The winner's speedup over each runtime's defaults, from the same side-by-side timing: their ratios
    to the reference divided ("vs_defaults": {backend: speedup}), and per runtime what was timed
    ("defaults": {backend: {trial, median_ms, relative, feasible, precision} or {trial, error}})."""
    own = winner["confirmed_relative"]["ratio"]
    index = {name: entries.index(t) for name, (t, _) in defaults.items() if t is not None}
    index |= {name: len(entries) + i for i, (name, _) in enumerate(untried)}
    vs, rows = {}, {}
    for name, (t, config) in defaults.items():
        r = results[index[name]]
        row: dict[str, Any] = {"trial": t.number if t is not None else None}
        if t is None:
            row["config"] = config
        if not r.built:
            rows[name] = row | {"error": r.error}
            continue
        rows[name] = row | {"median_ms": r.latency.median_ms, "relative": r.relative.to_dict(),
                            "feasible": r.feasible, "precision": r.rebuilt.precision}
        if own > 0:
            vs[name] = r.relative.ratio / own
    for f in winner.get("finalists") or []:  # which finalists are a runtime's defaults
        names = [name for name, row in rows.items() if row["trial"] == f["trial"]]
        if names:
            f["defaults"] = names[0]
    return {"vs_defaults": vs, "defaults": rows}


def _drop_earlier(study: optuna.Study, store: StoreRef | None, keep_all: bool) -> None:
    """No winner now: the engines earlier selections uploaded are no one's any more (unless all are kept)."""
    _upload(lambda: drop_selection_engines(study, store, keep_all), "removing the engines of the last selection")


def _decide(study: optuna.Study, problem: Problem, cands: list, base, entries: list,
            confirmed_run: Confirmation) -> dict | None:
    """The winner of a side-by-side run (not stored yet); None (best effort stored) when no finalist passed."""
    results = confirmed_run.finalists
    built = [(t, r) for t, r in zip(entries, results) if r.built]
    stats = {t.number: r.latency.to_dict() for t, r in built}  # the stored forms, as the winner's record keeps them
    ratio = {t.number: r.relative.to_dict() for t, r in built}
    confirmed = [(t, r.rebuilt.metrics) for t, r in built if t in cands and r.feasible]
    rejected = [t.number for t, r in zip(entries, results) if t in cands and not r.feasible]
    if not confirmed:
        study.set_user_attr(BEST_EFFORT_ATTR, _summary(cands[0]) | {"note": "failed the accuracy re-check"})
        return None
    choices = {f.number: choices_off_defaults(f.params, StoredTrial.of(f).config, problem.space) for f, _ in confirmed}
    pick, tied = simplest_among_ties([{"trial": f.number, "relative": ratio[f.number], "choices": choices[f.number]}
                                      for f, _ in confirmed])
    t, metrics = next((f, m) for f, m in confirmed if f.number == pick["trial"])
    rel = ratio[t.number]
    as_timed = {f.number: r.rebuilt.precision for f, r in built}  # what each engine timed computed in
    winner = _summary(t) | {
        "precision": as_timed.get(t.number) or StoredTrial.of(t).precision,
        "baseline_precision": (as_timed.get(base.number) or StoredTrial.of(base).precision) if base is not None else None,
        "confirmed_latency": stats[t.number],
        "confirmed_relative": rel,
        "confirmed_metrics": metrics,
        # a workload of several sets of shapes: each set's side-by-side figures (search.record.ShapeFigure)
        "confirmed_workload": next((r.workload for f, r in built if f.number == t.number), None),
        "baseline_trial": base.number if base is not None else None,
        "baseline_latency": stats.get(base.number) if base is not None else None,
        "speedup": 1.0 / rel["ratio"] if base is not None and base.number in stats else None,
        "speedup_interval": [1.0 / rel["ci_high"], 1.0 / rel["ci_low"]] if base is not None else None,
        "requirement": str(problem.requirement),
        "compared": {str(n): v["median_ms"] for n, v in stats.items()},
        # every finalist's side-by-side timing, for `tune`, `select` and the report (report/finalists.py)
        "finalists": sorted(({"trial": f.number, "baseline": base is not None and f.number == base.number,
                              "feasible": r.feasible, "relative": ratio[f.number], "process": r.process,
                              "workload": r.workload,
                              "choices": choices_off_defaults(f.params, StoredTrial.of(f).config, problem.space)}
                             | stats[f.number] for f, r in built), key=lambda f: f["relative"]["ratio"]),
        # the finalists that tie the fastest within noise, of which the simplest won (simplest_among_ties)
        "tie": {"fastest": min(confirmed, key=lambda fm: ratio[fm[0].number]["ratio"])[0].number,
                "trials": [f["trial"] for f in tied]} if tied else None,
        "rejected_on_recheck": rejected,
        "load": confirmed_run.load,
        "selected_at": time.time(),
    }
    return winner


def _upload(fn: Callable[[], Any], what: str) -> Any:
    """Run a call on the artifact store; one that fails is one warning (the selection stands; export then rebuilds)."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001  any store's error (S3 and GCS have their own): it never costs the selection
        print(f"warning: {what} in the artifact store failed ({type(exc).__name__}: {exc})", file=sys.stderr)
        return None


def _upload_finalists(study: optuna.Study, store: StoreRef, entries: list, results: list[Confirmed], saved: str,
                      keep_all: bool, only: int | None = None) -> dict[int, dict]:
    """Upload the engines of the finalists that passed the accuracy re-check, as timed (only: trial `only`'s,
    --keep-artifacts winner); then remove the engines of earlier selections (unless the study keeps them all).
    Returns {trial number: record}."""
    earlier = selection_engines(study)
    out = {}
    for i, (t, r) in enumerate(zip(entries, results)):
        if only is not None and t.number != only:
            continue
        if r.feasible and t.number not in out:
            out[t.number] = upload_engine(study, store, os.path.join(saved, str(i)), t.number, SELECTION,
                                          r.rebuilt.saved)
    drop_selection_engines(study, store, keep_all, earlier)
    return out


def _short(record: dict | None) -> dict | None:
    """What the winner keeps of its engine's record (the full one is the study attr ENGINE_PREFIX + id)."""
    if not record:
        return None
    return {k: record[k] for k in ("id", "sha256", "bytes", "files", "main", "source", "store")}


def choices_off_defaults(params: dict, config: dict, space: Space) -> int:
    """How far a config is from the defaults: its parameters off their space default (per-layer ones
    not counted here) plus the layers it keeps in float (the nodes of its keep-in-float lists)."""
    defaults = {p.name: p.default for p in space.params}
    off = sum(1 for name, value in params.items() if name in defaults and value != defaults[name])
    return off + sum(len(config.get(key) or []) for key in {o.key for o in space.overrides})


def _overlap(a: dict, b: dict) -> bool:
    """Two RelativeLatency dicts whose 95% intervals overlap."""
    return ci_overlap((a["ci_low"], a["ci_high"]), (b["ci_low"], b["ci_high"]))


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
    rec = StoredTrial.of(t)
    return {"trial": t.number, "config": rec.config, "build_key": rec.build_key, "latency": rec.latency,
            "metrics": rec.metrics, "violations": rec.violations, "feasible": is_feasible(t), "precision": rec.precision}
