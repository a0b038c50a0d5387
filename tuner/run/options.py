"""Everything `tuner tune` takes, as one dataclass (the Python API takes the same names)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import optuna

from ..analysis.sensitivity import DEFAULT_BUDGET
from ..measure.latency import LatencyProtocol
from ..store.storage import StorageURL, study_url


@dataclass
class TuneOptions:
    """None means "not given": on resume, the stored setting holds."""

    study: str
    model: str | None = None
    storage: str | optuna.storages.BaseStorage | None = None  # a URL; or, from the Python API, a storage object
    space: str | None = None
    data: str | None = None
    calib_data: str | None = None
    ref_outputs: str | None = None  # .npz of the training framework's outputs of --data: the reference (tuner.inputs.ref_outputs)
    shapes: list[str] | None = None
    int_ranges: list[str] | None = None
    in_flight: int | None = None  # requests in flight at once while timing (--throughput); None: latency
    require: str | list[str] | None = None
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

    def given(self) -> dict:
        """The settings given on this call, by the names search.settings.given_settings takes (it checks them)."""
        return {"model": self.model, "space": self.space, "data": self.data, "calib_data": self.calib_data,
                "shapes": self.shapes, "int_ranges": self.int_ranges, "require": self.require,
                "objectives": self.objectives, "sampler": self.sampler, "seed": self.seed, "timing": self.timing,
                "ref_outputs": self.ref_outputs, "in_flight": self.in_flight}


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
