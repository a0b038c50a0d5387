"""The Optuna study behind a tuning run: create or resume it with its settings and sampler."""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field, replace

import optuna

from ..errors import UserError
from ..measure.requirement import Requirement
from ..problem.spec import Problem
from .choices import Timing
from .record import SETTINGS_ATTR, StoredStudy
from .samplers import make_sampler, sampler_options
from .seeding import new_seed
from .settings import StudySettings

# The objective values, in the order Objectives names them; under paired timing the first is a ratio.
METRIC_NAMES = {Timing.ALONE: ("latency_ms", "error"), Timing.PAIRED: ("latency_relative_to_baseline", "error")}


@dataclass
class StudyContext:
    """A study opened for tuning, with the problem it tunes."""

    study: optuna.Study
    settings: StudySettings
    problem: Problem
    url: str
    warm_params: list[dict] = field(default_factory=list)  # another study's configs to try first (--warm-start)

    @property
    def objectives(self) -> tuple[str, ...]:
        return self.settings.objectives.names


class StudyAppeared(Exception):
    """Another process created the study between this one's look and its create (two `tuner tune` started
    at once on a new study): this one joins it as a resume."""

    def __init__(self, storage):
        super().__init__("the study was created by another process")
        self.storage = storage


def wait_for_settings(name: str, storage, timeout_s: float = 120.0, clock=time.monotonic, sleep=time.sleep) -> None:
    """The creator stores the settings right after creating the study: wait for them (a creator that died in
    between leaves a study without settings, refused as not engine-tuner's by the resume)."""
    deadline = clock() + timeout_s
    while clock() < deadline:
        study = load_existing(name, storage)
        if study is not None and StoredStudy.of(study).settings:
            return
        sleep(0.2)


def load_existing(name: str, storage) -> optuna.Study | None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return None


def stored_settings(study: optuna.Study | None, load_user_metrics: bool = True,
                    requirement: Requirement | None = None) -> StudySettings | None:
    """The study's settings; None for no study, or one engine-tuner did not make. requirement: parsed already
    (StudySettings.from_attrs)."""
    attrs = StoredStudy.of(study).settings if study is not None else None
    return StudySettings.from_attrs(attrs, load_user_metrics, requirement) if attrs else None


def create_or_resume(name: str, storage, study: optuna.Study | None, settings: StudySettings, problem: Problem,
                     sampler_object: optuna.samplers.BaseSampler | None = None) -> tuple[optuna.Study, StudySettings]:
    """Create the study (objective directions from the settings) or give the existing one a fresh
    sampler; store the settings. Called once the problem has loaded, so bad input writes nothing.
    A study without a seed (none given; or made before seeds were stored) gets one here, stored with its
    settings: every later process seeds its sampler with it, trial by trial (tuner.search.seeding)."""
    n_objectives = len(settings.objectives.names)
    if settings.seed is None:
        settings = replace(settings, seed=new_seed())
    sampler = make_sampler(settings, problem.space, given=sampler_object)
    if study is None:
        try:
            study = optuna.create_study(study_name=name, storage=storage, directions=["minimize"] * n_objectives,
                                        sampler=sampler)
        except optuna.exceptions.DuplicatedStudyError:
            raise StudyAppeared(storage) from None
        with warnings.catch_warnings():  # "experimental"; it names the axes of Optuna's plots and the dashboard
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            names = METRIC_NAMES[settings.timing or Timing.ALONE]
            study.set_metric_names(list(names[:n_objectives]))
    else:
        if len(study.directions) != n_objectives:
            raise UserError(f"study {name!r} has {len(study.directions)} objective(s); --objectives cannot change that")
        study.sampler = sampler  # made again from the stored settings: seeded per trial, it needs no other state
    settings = replace(settings, sampler_options=sampler_options(study.sampler))
    study.set_user_attr(SETTINGS_ATTR, settings.to_attrs())
    return study, settings
