"""The Python API, mirroring the CLI: tuner.tune(...), tuner.load_study(...), tuner.select(...), tuner.export(...)."""
from __future__ import annotations

from collections.abc import Iterable

import optuna

from .errors import UserError
from .problem.spec import Problem
from .run.options import TuneOptions
from .run.tune import TuneResult, tune_study
from .search.reading import load_checked
from .search.settings import SETTINGS_ATTR, allowed_metrics, check_metrics
from .search.study import stored_settings
from .store.storage import study_url
from .winner.export import export_winner
from .winner.select import select_winner

StorageArg = str | optuna.storages.BaseStorage | None  # a URL, or an Optuna storage object (store.storage.study_url)


def tune(model: str | None = None, study: str = "demo", **options) -> TuneResult:
    """Run (or resume) a study; keyword options are TuneOptions.of's (= `tuner tune` flags). As in Optuna,
    sampler= takes a name or a sampler object, storage= a URL or a storage object (docs/studies.md#python)."""
    return tune_study(TuneOptions.of(study, model=model, **options))


def load_study(study: str, storage: StorageArg = None) -> optuna.Study:
    """Open an existing study for reading (works while another process writes it; creates nothing)."""
    return load_checked(study, study_url(study, storage), reading=True)


def study_problem(study: optuna.Study, allow_metrics: Iterable[str] = ()) -> Problem:
    """The problem a study tunes, loaded from its stored settings. A user metric it names is run (by
    select, export, verify) only if allow_metrics names it and its file is the study's (check_metrics)."""
    settings = stored_settings(study, load_user_metrics=False)
    if settings is None:
        raise UserError(f"study {study.study_name!r} was not made by engine-tuner (no {SETTINGS_ATTR})")
    settings = check_metrics(study.study_name, settings, allowed_metrics(allow_metrics))
    return settings.spec.load(settings.requirement)


def select(study: str, storage: StorageArg = None, top_k: int = 3, allow_metrics: Iterable[str] = ()) -> dict | None:
    s = load_checked(study, study_url(study, storage))
    return select_winner(s, study_problem(s, allow_metrics), top_k)


def export(study: str, out: str, storage: StorageArg = None, best_effort: bool = False, force: bool = False,
           allow_metrics: Iterable[str] = ()) -> dict:
    s = load_checked(study, study_url(study, storage))
    return export_winner(s, study_problem(s, allow_metrics), out, best_effort, force=force)
