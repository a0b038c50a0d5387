"""Warm start: a new study begins where another ended. Its top feasible configs (winner first) are
queued right after the baseline, and its sensitivity ranking is reused when the model and data are the
same. Latencies are measured again here, never copied: the other study may be on another machine or
another library version."""
from __future__ import annotations

from dataclasses import dataclass, field

import optuna

from ..errors import UserError
from ..inputs.space import Space
from ..search.record import StoredStudy, StoredTrial
from ..search.settings import StudySettings
from ..search.study import stored_settings
from ..search.trials import completed, is_feasible, speed_key
from ..store.storage import load_study, study_url

TOP = 5  # configs taken from the other study: its winner, then its fastest feasible trials


@dataclass
class WarmStart:
    source: str  # NAME@URL
    params: list[dict] = field(default_factory=list)  # Optuna params to enqueue, winner first
    rankings: dict | None = None  # the other study's rankings, when model and data are the same


def parse_source(text: str) -> tuple[str, str]:
    """OTHER or OTHER@URL (default: the other study's own SQLite file under studies/)."""
    name, _, url = text.partition("@")
    if not name:
        raise UserError(f"--warm-start {text!r}: write OTHER or OTHER@STORAGE_URL, e.g. bert@sqlite:///studies/bert.db")
    return name, study_url(name, url)


def warm_start(text: str, settings: StudySettings, space: Space) -> WarmStart:
    """What the study named by --warm-start gives this one (read only: nothing of it changes)."""
    name, url = parse_source(text)
    other = load_study(name, url, reading=True)
    theirs = stored_settings(other, load_user_metrics=False)
    same_problem = theirs is not None and (theirs.model_hash, theirs.data_hash) == (settings.model_hash, settings.data_hash)
    rankings = {k: v for k, v in ((theirs.rankings if theirs else None) or {}).items()
                if k in {o.name for o in space.overrides}}
    params = [_fitting(t, space, same_problem and bool(rankings)) for t in _top_trials(other)]
    return WarmStart(f"{name}@{url}", [p for p in params if p], rankings if same_problem and rankings else None)


def _top_trials(study: optuna.Study) -> list:
    """The other study's winner, then its fastest feasible trials: one per distinct build."""
    feasible = sorted((t for t in completed(study) if is_feasible(t)), key=speed_key)
    won = StoredStudy.of(study).winner
    winner = won.trial if won else None
    feasible.sort(key=lambda t: t.number != winner)  # stable: the winner first, the rest by speed
    seen, out = set(), []
    for t in feasible:
        key = StoredTrial.of(t).build_key
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out[:TOP]


def _fitting(trial, space: Space, with_layers: bool) -> dict:
    """The trial's parameters that this space has, values within their choices. Per-layer parameters
    only where the ranking they refer to is reused (a rank means nothing under another ranking)."""
    by_name = {p.name: p for p in space.params}
    out = {}
    for name, value in trial.params.items():
        if "/" in name:
            if with_layers:
                out[name] = value
        elif name in by_name and (by_name[name].choices is None or value in by_name[name].choices):
            out[name] = value
    return out
