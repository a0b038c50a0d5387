"""A study's record of what it was made with: one typed, frozen StudySettings, built once per command
from what the user gave (`given`, checked here: the model hashed, the requirement parsed) or from the
stored study (`from_attrs`), and stored as the study's user attr `tuner_settings` (`to_attrs`). How a
resume merges the two, and the checks that the study's files are still its files."""
from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import optuna

from .. import __version__
from ..errors import UserError
from ..inputs.model import model_hash
from ..inputs.space import DEFAULT_SPACE, space_file
from ..inputs.user_paths import check_input_file
from ..measure.metric_source import locate_metric, source_hash, split_spec
from ..measure.requirement import Requirement
from ..problem.spec import ProblemSpec, check_in_flight
from .choices import SAMPLERS, Objectives, Timing, values
from .record import SETTINGS_ATTR  # noqa: F401  (read from here by the readers of settings)

# 2: StudySettings (flat, with "schema"); 1: the untyped dict before it, with a second copy of the problem
# spec under "spec" (from_attrs reads both: the keys are the same).
SCHEMA = 2
# Settings a user gives that are part of the problem spec (the rest are the study's own).
SPEC_KEYS = ("model_path", "space_path", "data", "calib_data", "shapes", "int_ranges", "ref_outputs", "in_flight")


def file_hash(path: str) -> str:
    """A space file's hash as a study stores it (space_hash): its sha256's first 16 hex."""
    return source_hash(path, 16)


def _abs(path: str | None) -> str | None:
    return os.path.abspath(path) if path else None


@dataclass(frozen=True)
class StudySettings:
    """What a study was made with and for. Every command builds one, once: from the user's input
    (new_settings, merge) or from the stored study (from_attrs)."""

    spec: ProblemSpec  # the problem: model, space, data, shapes, requirement text (what child processes load)
    requirement: Requirement
    model_hash: str = ""
    space_hash: str | None = None
    data_hash: str | None = None
    metric_hashes: dict = field(default_factory=dict)  # user metric -> sha256 of its source (check_metrics)
    objectives: Objectives = Objectives.LATENCY_ERROR
    sampler: str = "tpe"
    seed: int | None = None
    timing: Timing | None = None  # None until the study's backends decide (run/prepare.py)
    backend: str = ""  # the space's backends, comma-separated: part of every build key
    machine: dict = field(default_factory=dict)  # the fingerprint its trials are timed on
    study_machine: dict | None = None  # a joining worker's study's machine, where `machine` is the worker's
    encoding: dict = field(default_factory=dict)  # per-layer override -> its effective encoding
    rankings: dict | None = None  # per override: the route variants and the layer ranking (tuner.analysis.rankings)
    rankings_for: list | None = None  # [space hash, data hash] the rankings were made for
    notes: tuple[str, ...] = ()  # what the user was told once about the problem and the analysis
    warm_start: dict | None = None
    sampler_options: dict = field(default_factory=dict)
    created_with: str = __version__
    created_at: float = 0.0

    @property
    def model_path(self) -> str:
        return self.spec.model_path

    @property
    def space_path(self) -> str:
        return self.spec.space_path or DEFAULT_SPACE

    @property
    def paired(self) -> bool:
        return self.timing == Timing.PAIRED

    def value(self, key: str) -> Any:
        """A setting by its stored name (spec fields included), as `given` holds it."""
        if key in SPEC_KEYS:
            return getattr(self.spec, key)
        return getattr(self, key)

    def to_attrs(self) -> dict:
        """The stored form: flat and JSON-able (the keys schema 1 had, without the spec's second copy)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("spec", "requirement")}
        out |= {k: v for k, v in asdict(self.spec).items() if k in SPEC_KEYS}
        out |= {"schema": SCHEMA, "require": str(self.requirement), "objectives": self.objectives.value,
                "timing": self.timing.value if self.timing else None, "notes": list(self.notes)}
        return out

    @classmethod
    def from_attrs(cls, attrs: dict, load_user_metrics: bool = True,
                   requirement: Requirement | None = None) -> StudySettings:
        """A stored study's settings, schema 1 or 2. load_user_metrics=False: a report reads the stored
        requirement without importing the user's metric modules. requirement: the parent's, parsed already (a
        local worker's LoadedSpec), used instead of parsing the stored text."""
        if attrs.get("schema", 1) > SCHEMA:
            raise UserError(f"this study was written by a newer engine-tuner (settings schema {attrs['schema']}, "
                            f"this one reads up to {SCHEMA}): pip install -U engine-tuner")
        if requirement is None:
            requirement = Requirement.parse(attrs.get("require") or "", load_user_metrics)
        spec = ProblemSpec(**{k: attrs.get(k) for k in SPEC_KEYS}, require=str(requirement))
        own = {f.name for f in fields(cls)} - {"spec", "requirement"}
        kept = {k: v for k, v in attrs.items() if k in own and v is not None}
        kept["objectives"] = Objectives(kept.get("objectives", Objectives.LATENCY_ERROR.value))
        kept["timing"] = Timing(attrs.get("timing") or Timing.ALONE.value)  # a study made before paired timing
        kept["notes"] = tuple(kept.get("notes", ()))
        return cls(spec=spec, requirement=requirement, **kept)


def readable_settings(attrs: dict | None) -> StudySettings:
    """A study's settings as reports read them: user metrics not imported; a study engine-tuner did not make
    reads as blank settings, and a stored requirement that no longer parses as none."""
    attrs = attrs or {}
    try:
        return StudySettings.from_attrs(attrs, load_user_metrics=False)
    except UserError:
        return StudySettings.from_attrs({k: v for k, v in attrs.items() if k != "require"}, load_user_metrics=False)


# A sampler object handed to the Python API (tuner.tune(sampler=TPESampler(...))) is stored by this prefix and
# its class: Optuna keeps no sampler, so every process that samples must be handed the object again.
OBJECT_PREFIX = "object:"


def object_name(sampler: optuna.samplers.BaseSampler) -> str:
    """The name a study stores for a sampler object: its class, e.g. object:optuna.samplers.TPESampler."""
    cls = type(sampler)
    module = "optuna.samplers" if cls.__module__.startswith("optuna.samplers.") else cls.__module__
    return f"{OBJECT_PREFIX}{module}.{cls.__qualname__}"


def given_settings(inputs: ProblemSpec | None = None, objectives=None, sampler=None, seed=None, timing=None) -> dict:
    """The settings the user gave on this call (inputs: the problem's, as given), by their stored names and in
    their typed form (a parsed Requirement, Objectives, Timing), checked (None or empty: not given)."""
    inputs = inputs or ProblemSpec()
    given: dict = {}
    if inputs.model_path:
        check_input_file(inputs.model_path, "model", "pass the path of an .onnx file")
        given["model_path"] = _abs(inputs.model_path)
        given["model_hash"] = model_hash(inputs.model_path)
    if inputs.space_path:
        given["space_path"] = _abs(space_file(inputs.space_path))
    for name in ("data", "calib_data", "ref_outputs"):  # files: stored absolute, a resume may run elsewhere
        if getattr(inputs, name):
            given[name] = _abs(getattr(inputs, name))
    for name in ("shapes", "int_ranges"):
        if getattr(inputs, name):
            given[name] = getattr(inputs, name)
    if inputs.in_flight is not None:
        given["in_flight"] = check_in_flight(inputs.in_flight) if inputs.in_flight != 1 else None
    if inputs.require:
        given["requirement"] = Requirement.parse(inputs.require)
    if objectives:
        given["objectives"] = _choice("--objectives", objectives, Objectives)
    if isinstance(sampler, optuna.samplers.BaseSampler):  # the Python API's object: stored by its class
        given["sampler"] = object_name(sampler)
    elif sampler:
        given["sampler"] = _choice("--sampler", sampler, SAMPLERS)
    if seed is not None:
        given["seed"] = seed
    if timing:
        given["timing"] = _choice("--timing", timing, Timing)
    return given


def _choice(flag: str, value: str, choices) -> Any:
    if value not in values(choices):
        raise UserError(f"{flag} {value}: use one of {', '.join(values(choices))}")
    return choices(value) if isinstance(choices, type) else value


def _with(settings: StudySettings, given: dict) -> StudySettings:
    """settings with the given values (spec fields into the spec; the requirement's text too)."""
    spec = replace(settings.spec, **{k: v for k, v in given.items() if k in SPEC_KEYS})
    own = {k: v for k, v in given.items() if k not in SPEC_KEYS}
    if "requirement" in own:
        spec = replace(spec, require=str(own["requirement"]))
    if "space_path" in given:
        own["space_hash"] = file_hash(given["space_path"]) if os.path.isfile(given["space_path"]) else None
    return replace(settings, spec=spec, **own)


def new_settings(given: dict) -> StudySettings:
    if "model_path" not in given:
        raise UserError("a new study needs the model: tuner tune MODEL.onnx --study NAME")
    blank = StudySettings(ProblemSpec(given["model_path"], space_path=DEFAULT_SPACE, require=""), Requirement(()),
                          given["model_hash"], created_at=time.time())
    return _with(blank, {"space_path": DEFAULT_SPACE} | given)


def merge_settings(study_name: str, stored: StudySettings, given: dict, force: bool) -> StudySettings:
    """Resume with the stored settings; a given setting that differs is refused unless force."""
    if "model_hash" in given and given["model_hash"] == stored.model_hash:
        given = {k: v for k, v in given.items() if k not in ("model_path", "model_hash")}  # same model, moved
    elif "model_hash" in given:  # its trials measured another model: --force cannot make them this one's
        raise UserError(f"study {study_name!r} was made for another model ({stored.model_path}, model_hash "
                        f"{stored.model_hash}; this one is {given['model_hash']}); its trials say nothing about "
                        "this model, so --force cannot change it: use a new --study name")
    diffs = [k for k, v in given.items() if stored.value(k) != v]
    # its trials' first objective is a ratio under one and milliseconds under the other
    if "timing" in diffs and stored.timing is not None:
        raise UserError(f"study {study_name!r} times its candidates {stored.timing.value}, not {given['timing'].value}: "
                        "its trials' latencies would not compare, so --force cannot change it; use a new --study name")
    if diffs and not force:
        k = diffs[0]
        shown = {"requirement": "require"}.get(k, k)
        raise UserError(f"study {study_name!r} was created with {shown}={_shown(stored.value(k))!r}, not "
                        f"{_shown(given[k])!r}; use another --study name, or --force to change the study's settings")
    return _with(stored, given)


def _shown(value: Any) -> Any:
    return value.value if isinstance(value, (Objectives, Timing)) else str(value) if isinstance(value, Requirement) else value


def check_inputs(study_name: str, settings: StudySettings, force: bool = False) -> None:
    """The files the study was made for are still the same files. A changed space file may go on with
    --force; a changed model never (its trials measured the old one)."""
    for path, stored, fn, what in ((settings.model_path, settings.model_hash, model_hash, "model_hash"),
                                   (settings.space_path, settings.space_hash, file_hash, "space_hash")):
        if not os.path.isfile(path):
            raise UserError(f"study {study_name!r}: {path} is missing; "
                            f"pass the file again (tuner tune FILE --study {study_name})")
        if stored and (what == "model_hash" or not force) and fn(path) != stored:
            fix = "use a new --study name" + (", or --force to continue with the new file" if what != "model_hash" else
                                              " (--force cannot change a study's model)")
            raise UserError(f"study {study_name!r}: {path} changed since the study began ({what} differs); {fix}")


def check_data(study_name: str, settings: StudySettings, data_hash: str) -> None:
    """The validation and calibration data are the study's: its errors were measured on them (--force or not)."""
    if settings.data_hash not in (None, data_hash):
        raise UserError(f"study {study_name!r}: the validation data here differ from the study's (data hash "
                        f"{data_hash}, the study has {settings.data_hash}); give the same --data/--shape/--int-range/"
                        "--ref-outputs, or use a new --study name for new data (--force cannot change them)")


TRUST = "docs/distributed.md#trust-model"


def allowed_metrics(flags: Iterable[str] | None, requirement: Requirement | None = None) -> set[str]:
    """The user metrics a command line allows to run: its --allow-metric's and those of its own --require."""
    allowed = set(requirement.user_metrics()) if requirement else set()
    for spec in flags or ():
        try:
            split_spec(spec)
        except UserError:
            raise UserError(f"--allow-metric {spec}: write MODULE:FUNCTION, e.g. my_metrics:score") from None
        allowed.add(spec)
    return allowed


def check_metrics(study_name: str, settings: StudySettings, allowed: Iterable[str] | None, force: bool = False,
                  forceable: bool = False) -> StudySettings:
    """A study's user metrics are code that whoever writes its database names: a process runs one only if
    its own command line allows it (`allowed`: allowed_metrics) and the metric's source file here is the
    one the study was made with (its sha256 in metric_hashes), as the model's. allowed=None: the caller
    already allowed them (a local worker of `tuner tune`, which checked). force (tune --force, forceable):
    go on with a changed file. Returns the settings with the hashes of the requirement's user metrics
    (a new metric's, or an older study's, taken from the file here)."""
    hashes = {}
    allowed = None if allowed is None else set(allowed)
    for spec in settings.requirement.user_metrics():
        stored = settings.metric_hashes.get(spec)
        if allowed is not None and spec not in allowed:
            why = (" and was made before studies stored a metric's source hash, so nothing ties it to a file"
                   if stored is None else ": code chosen by whoever writes the study's database")
            raise UserError(f"study {study_name!r} names the user metric {spec}{why}; a command runs a study's "
                            f"metric only if its own command line allows it: add --allow-metric {spec} if you trust "
                            f"this host's {spec} ({TRUST})")
        source = locate_metric(spec)
        here = source.sha256()
        if stored is not None and here != stored and not force:
            fix = ("give the same file, or --force to go on with this one (the study's errors so far were measured "
                   "with the other)" if forceable else "give this host the study's file")
            raise UserError(f"metric {spec}: the file here differs from the one the study {study_name!r} was made with "
                            f"(sha256 {here[:16]}, the study has {stored[:16]}): {source.path}; {fix}")
        hashes[spec] = here
    return replace(settings, metric_hashes=hashes)
