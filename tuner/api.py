"""The Python API, mirroring the CLI: tuner.tune(...), tuner.load_study(...), tuner.select(...), tuner.export(...)."""
from __future__ import annotations

import optuna

from .errors import UserError
from .evaluate import Problem
from .storage import default_url, open_storage
from .study import SETTINGS_ATTR, TuneOptions, problem_spec
from .tune import TuneResult
from .tune import tune as _tune


def tune(model: str | None = None, study: str = "demo", **options) -> TuneResult:
    """Run (or resume) a study; keyword options are those of TuneOptions (= `tuner tune` flags)."""
    return _tune(TuneOptions(study=study, model=model, **options))


def load_study(study: str, storage: str | None = None) -> optuna.Study:
    """Open an existing study for reading (works while another process writes it)."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    url = storage or default_url(study)
    try:
        return optuna.load_study(study_name=study, storage=open_storage(url))
    except KeyError:
        raise UserError(f"no study {study!r} in {url}; `tuner studies` lists the studies") from None


def study_problem(study: optuna.Study) -> Problem:
    """The problem a study tunes, loaded from its stored settings."""
    settings = study.user_attrs.get(SETTINGS_ATTR)
    if not settings:
        raise UserError(f"study {study.study_name!r} was not made by engine-tuner (no {SETTINGS_ATTR})")
    return problem_spec(settings).load()


def select(study: str, storage: str | None = None, top_k: int = 3) -> dict | None:
    from .select import select_winner

    s = load_study(study, storage)
    return select_winner(s, study_problem(s), top_k)


def export(study: str, out: str, storage: str | None = None, best_effort: bool = False) -> dict:
    from .select import export_winner

    s = load_study(study, storage)
    return export_winner(s, study_problem(s), out, best_effort)
