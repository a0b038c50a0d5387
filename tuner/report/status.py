"""`tuner status` and `tuner studies`: what a study holds, read-only."""
from __future__ import annotations

import os
from collections.abc import Callable

import optuna
from optuna.trial import TrialState

from ..inputs.user_paths import dir_bytes
from ..measure.machine import machine_id
from ..search.failures import learnt_failures
from ..search.reading import CheckedStudy
from ..search.record import StoredStudy, StoredTrial
from ..search.settings import readable_settings
from ..search.trials import (
    baseline_modes,
    baseline_trial,
    best_feasible,
    is_feasible,
    latency_of,
    speedup_of,
    was_busy,
    work_line,
)
from ..store.artifacts import resolve_store
from ..store.artifacts import usage as artifacts_usage
from ..store.storage import StorageURL
from .as_run import precision_text, serving_text
from .variants import rankings_lines
from .winner_facts import winner_lines


def status_lines(study: optuna.Study, url: str, engines_dir: str | None = None) -> list[str]:
    trials = study.get_trials(deepcopy=False)
    stored = StoredStudy.of(study)  # the study's attributes, read once
    settings = readable_settings(stored.settings)
    by_state: dict[str, int] = {}
    for t in trials:
        by_state[t.state.name] = by_state.get(t.state.name, 0) + 1
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    feasible = [t for t in done if is_feasible(t)]
    reused = sum(1 for t in done if StoredTrial.of(t).copied)
    lines = [f"study {study.study_name} in {url}",
             f"model {settings.model_path} (hash {settings.model_hash}), requirement {settings.requirement or 'none'}, "
             f"objectives {settings.objectives.value}, sampler {settings.sampler}",
             f"work: {work_line(trials, settings.rankings)}; timing {settings.timing.value}{serving_text(settings.spec)}",
             "trials: " + (", ".join(f"{k.lower()} {v}" for k, v in sorted(by_state.items())) or "none")
             + f"; feasible {len(feasible)}, infeasible {len(done) - len(feasible)}, reused {reused}"]
    lines += rankings_lines(settings.rankings)
    busy = [t.number for t in done if was_busy(t)]
    if busy:
        lines.append(f"warning: {len(busy)} trial(s) were timed while other processes kept the machine busy "
                     f"({', '.join(map(str, busy[:10]))}{' ...' if len(busy) > 10 else ''}): their latencies read slow")
    for f in learnt_failures(stored.attrs):
        lines.append(f"route that does not build (learnt from trial {f['trial']}, not built again): "
                     f"{f['choice']}: {f['reason']}")
    base, best = baseline_trial(study), best_feasible(study)
    if base is not None:
        lines.append(f"baseline: trial {base.number}, {latency_of(base):.2f} ms, {_precision(base)}")
    if best is not None:
        up = speedup_of(best, base)
        speed = f"{up:.2f}x the baseline ({latency_of(best):.2f} ms)" if up else f"{latency_of(best):.2f} ms"
        lines.append(f"best feasible in the search: trial {best.number}, {speed}, {_precision(best)}")
    elif done:
        lines.append("best feasible: none - no trial meets the requirement yet")
    if done and len(study.directions) > 1:
        lines.append(f"Pareto set: {len(study.best_trials)} trials")
    lines += winner_lines(stored, study.study_name)
    modes = baseline_modes(trials)
    if modes:
        lines.append(f"warning: {modes}")
    lines += machine_lines(trials)
    path = StorageURL(url).path
    disk = []
    if path and os.path.isfile(path):
        disk.append(f"database {os.path.getsize(path) / 1e6:.1f} MB")
    if engines_dir and os.path.isdir(engines_dir):
        disk.append(f"engines {dir_bytes(engines_dir) / 1e6:.1f} MB in {engines_dir}")
    if disk:
        lines.append("disk: " + ", ".join(disk))
    lines.append(artifacts_usage(study, resolve_store(study)))
    return lines


def _precision(t) -> str:
    """The trial's route and what its engine computed in ("precision fp32, computed as bf16 (...)")."""
    rec = StoredTrial.of(t)
    return precision_text(rec.config, rec.precision)


def machine_lines(trials) -> list[str]:
    """Trials per machine (fingerprint id), with each machine's baseline: speedups compare within one."""
    rows: dict[str, dict] = {}
    for t in trials:
        rec = StoredTrial.of(t)
        fp = rec.machine
        if not fp:
            continue
        row = rows.setdefault(machine_id(fp), {"fp": fp, "states": {}, "workers": set(), "baseline": None})
        row["states"][t.state.name.lower()] = row["states"].get(t.state.name.lower(), 0) + 1
        if rec.worker is not None:
            row["workers"].add(rec.worker.rsplit(":", 1)[0])
        if rec.baseline and t.state == TrialState.COMPLETE and row["baseline"] is None:
            row["baseline"] = latency_of(t)
    if not rows:
        return []
    out = ["trials per machine:"]
    for mid, row in rows.items():
        fp = row["fp"]
        states = ", ".join(f"{k} {v}" for k, v in sorted(row["states"].items()))
        base = f", baseline {row['baseline']:.2f} ms" if row["baseline"] is not None else ", no baseline yet"
        hosts = f", hosts {', '.join(sorted(row['workers']))}" if row["workers"] else ""
        tag = f" [{fp['tag']}]" if fp.get("tag") else ""
        out.append(f"  {mid} {fp.get('cpu', '?')}, {fp.get('cores', '?')} cores{tag}: {states}{base}{hosts}")
    return out


def studies_rows(url: str, storage, disk: Callable[[optuna.Study], str] | None = None) -> list[str]:
    """One line per study of the storage; disk: what the study's files take (tuner studies)."""
    rows = []
    for s in optuna.get_all_study_summaries(storage, include_best_trial=False):
        study = CheckedStudy(optuna.load_study(study_name=s.study_name, storage=storage))
        stored = StoredStudy.of(study)
        settings = readable_settings(stored.settings)
        best, winner = best_feasible(study), stored.winner
        if winner and winner.speedup:
            best_txt = f"winner {winner.speedup:.2f}x confirmed (trial {winner.trial})"
        elif best:
            up = speedup_of(best, baseline_trial(study))
            best_txt = f"best {up:.2f}x in the search (trial {best.number})" if up else \
                f"best {latency_of(best):.2f} ms in the search (trial {best.number})"
        else:
            best_txt = "no feasible trial"
        rows.append(f"{s.study_name:20s} {s.n_trials:4d} trials  {os.path.basename(settings.model_path or '?'):20s} "
                    f"{best_txt}  [{url}]" + (f"  {disk(study)} on disk" if disk else ""))
    return rows
