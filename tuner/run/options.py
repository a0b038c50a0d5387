"""Everything `tuner tune` takes, as one dataclass (the Python API takes the same names)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields

import optuna

from ..analysis.sensitivity import DEFAULT_BUDGET
from ..measure.latency import LatencyProtocol
from ..problem.spec import ProblemSpec
from ..store.storage import StorageURL, study_url


@dataclass
class TuneOptions:
    """None means "not given": on resume, the stored setting holds."""

    study: str
    problem: ProblemSpec = field(default_factory=ProblemSpec)  # the model, space, data, requirement... as given
    storage: str | optuna.storages.BaseStorage | None = None  # a URL; or, from the Python API, a storage object
    allow_metrics: list[str] = field(default_factory=list)  # MODULE:FUNC a stored study may run (--allow-metric)
    objectives: str | None = None
    sampler: str | optuna.samplers.BaseSampler | None = None  # a name; or, from the Python API, a sampler object
    seed: int | None = None
    n_trials: int | None = None
    max_trials: int | None = None  # study-wide budget over all workers, stored in the study (run.claims)
    timeout: float | None = None
    enqueue: list[str] = field(default_factory=list)
    force: bool = False
    trial_timeout: float = 600.0
    jobs: int = 1
    jobs_over_cores: bool = False  # else --jobs is capped at the core count (builds would only compete)
    stop_after_no_improvement: int | None = None
    top_k: int = 3
    select: bool = True
    quiet: bool = False
    progress: bool = True
    keep_engines: bool = False  # every trial's engine kept on disk and, at selection, in the artifact store
    keep_artifacts: str | None = None  # --keep-artifacts (tuner.store.artifacts.KEEP); None: the study's, else winner
    artifacts: str | None = None  # the study's artifact store (--artifacts); None: the stored one, or beside its file
    engines_dir: str | None = None
    protocol: LatencyProtocol | None = None
    timing: str | None = None  # paired (default on CPU backends) or alone; stored in the study
    when_busy: str = "warn"  # wait: hold a timing back while other processes keep the machine busy
    warm_start: str | None = None  # OTHER[@URL]: begin with another study's best configs (and ranking)
    sensitivity_budget: int | None = DEFAULT_BUDGET  # builds of the per-layer analysis; None or 0: no cap
    sensitivity_method: str = "activations"  # how layers are ranked: search.choices.SENSITIVITY_METHODS

    @property
    def storage_url(self) -> StorageURL:
        return study_url(self.study, self.storage)

    @property
    def sampler_object(self) -> optuna.samplers.BaseSampler | None:
        return self.sampler if isinstance(self.sampler, optuna.samplers.BaseSampler) else None

    @classmethod
    def of(cls, study: str, **names) -> TuneOptions:
        """Options by the names `tuner tune` and `tuner.tune(...)` take: the problem's inputs (model, space, data,
        calib_data, ref_outputs, shapes, int_ranges, in_flight, require: a str or several) go into `problem`, by
        ProblemSpec's field names; the rest are this class's fields."""
        inputs = {GIVEN_AS.get(k, k): names.pop(k) for k in list(names) if GIVEN_AS.get(k, k) in INPUTS}
        if isinstance(inputs.get("require"), list):  # --require given several times: one requirement of all bounds
            inputs["require"] = ", ".join(inputs["require"])
        return cls(study=study, problem=ProblemSpec(**inputs), **names)

    def given(self) -> dict:
        """The settings given on this call, as search.settings.given_settings takes them (it checks them)."""
        return {"inputs": self.problem, "objectives": self.objectives, "sampler": self.sampler, "seed": self.seed,
                "timing": self.timing}


GIVEN_AS = {"model": "model_path", "space": "space_path"}  # the user's names of ProblemSpec's fields, where they differ
# What a user gives of a problem; the others are the loader's (batches, the model's hash as validated)
INPUTS = {f.name for f in fields(ProblemSpec)} - {"model_hash", "n_batches", "n_calib"}


def trials_log(study: str, engines: str) -> str:
    """The file that gets every trial's full line (the terminal's are cut short): beside the engines' folder."""
    return os.path.join(os.path.dirname(engines) or ".", f"{study}-trials.log")


def engines_dir(study: str, storage_url: str, given: str | None = None) -> str:
    """Where trial engines are built: --engines-dir, else STUDY-engines next to the study's file."""
    if given:
        return given
    path = StorageURL(storage_url).path
    base = os.path.dirname(path) if path else "tuner-engines"
    return os.path.join(base or ".", f"{study}-engines")
