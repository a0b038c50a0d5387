"""A study's stored settings (the user attr `tuner_settings`): what the user gave, how a resume merges
it with what is stored, and the problem spec it defines."""
from __future__ import annotations

import hashlib
import os
import time

from .. import __version__
from ..errors import UserError
from ..measure.requirement import Requirement
from ..model import model_hash
from ..problem import ProblemSpec
from ..space import DEFAULT_SPACE

SETTINGS_ATTR = "tuner_settings"
OBJECTIVES = {"latency,error": ("latency", "error"), "latency": ("latency",)}
SAMPLERS = ("tpe", "nsga2", "gp", "random", "grid", "fast", "full", "mixed")  # the last three: tuner.search.plan_samplers
TIMINGS = ("paired", "alone")  # paired: each candidate timed alternately with the baseline (measure/paired.py)
SPEC_FIELDS = ("space_path", "data", "calib_data", "shapes", "int_ranges", "require")


def file_hash(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def _abs(path: str | None) -> str | None:
    return os.path.abspath(path) if path else None


def given_settings(model=None, space=None, data=None, calib_data=None, shapes=None, int_ranges=None, require=None,
                   objectives=None, sampler=None, seed=None, timing=None) -> dict:
    """The settings the user gave on this call, in stored form (None: not given)."""
    given: dict = {}
    if model:
        if not os.path.isfile(model):
            raise UserError(f"{model}: no such model file")
        given["model_path"] = _abs(model)
        given["model_hash"] = model_hash(model)
    if space:
        given["space_path"] = _abs(space)
    for name, value in (("data", _abs(data)), ("calib_data", _abs(calib_data)), ("shapes", shapes),
                        ("int_ranges", int_ranges)):
        if value:
            given[name] = value
    if require:
        given["require"] = str(Requirement.parse(require))
    if objectives:
        if objectives not in OBJECTIVES:
            raise UserError(f"--objectives {objectives}: use one of {', '.join(OBJECTIVES)}")
        given["objectives"] = objectives
    if sampler:
        if sampler not in SAMPLERS:
            raise UserError(f"--sampler {sampler}: use one of {', '.join(SAMPLERS)}")
        given["sampler"] = sampler
    if seed is not None:
        given["seed"] = seed
    if timing:
        if timing not in TIMINGS:
            raise UserError(f"--timing {timing}: use one of {', '.join(TIMINGS)}")
        given["timing"] = timing
    return given


def new_settings(given: dict) -> dict:
    if "model_path" not in given:
        raise UserError("a new study needs the model: tuner tune MODEL.onnx --study NAME")
    settings = {"space_path": DEFAULT_SPACE, "data": None, "calib_data": None, "shapes": None, "int_ranges": None,
                "require": "", "objectives": "latency,error", "sampler": "tpe", "seed": None}
    settings.update(given)
    settings["space_hash"] = file_hash(settings["space_path"]) if os.path.isfile(settings["space_path"]) else None
    settings.update({"created_with": __version__, "created_at": time.time()})
    return settings


def merge_settings(study_name: str, stored: dict, given: dict, force: bool) -> dict:
    """Resume with the stored settings; a given setting that differs is refused unless force."""
    if "model_hash" in given and given["model_hash"] == stored["model_hash"]:
        given = {k: v for k, v in given.items() if k not in ("model_path", "model_hash")}  # same model, moved
    elif "model_hash" in given:  # its trials measured another model: --force cannot make them this one's
        raise UserError(f"study {study_name!r} was made for another model ({stored.get('model_path')}, model_hash "
                        f"{stored['model_hash']}; this one is {given['model_hash']}); its trials say nothing about "
                        "this model, so --force cannot change it: use a new --study name")
    diffs = [k for k, v in given.items() if stored.get(k) != v]
    if diffs and not force:
        k = diffs[0]
        raise UserError(f"study {study_name!r} was created with {k}={stored.get(k)!r}, not {given[k]!r}; "
                        "use another --study name, or --force to change the study's settings")
    merged = dict(stored)
    merged.update(given)
    if "space_path" in given:
        merged["space_hash"] = file_hash(given["space_path"])
    return merged


def problem_spec(settings: dict) -> ProblemSpec:
    return ProblemSpec(settings["model_path"], **{k: settings.get(k) for k in SPEC_FIELDS})


def check_inputs(study_name: str, settings: dict, force: bool = False) -> None:
    """The files the study was made for are still the same files. A changed space file may go on with
    --force; a changed model never (its trials measured the old one)."""
    for path_key, hash_key, fn in (("model_path", "model_hash", model_hash), ("space_path", "space_hash", file_hash)):
        path = settings[path_key]
        if not os.path.isfile(path):
            raise UserError(f"study {study_name!r}: {path} is missing; pass the file again (tuner tune FILE --study {study_name})")
        if settings.get(hash_key) and (hash_key == "model_hash" or not force) and fn(path) != settings[hash_key]:
            fix = "use a new --study name" + (", or --force to continue with the new file" if hash_key != "model_hash" else
                                              " (--force cannot change a study's model)")
            raise UserError(f"study {study_name!r}: {path} changed since the study began ({hash_key} differs); {fix}")


def check_data(study_name: str, settings: dict, data_hash: str) -> None:
    """The validation and calibration data are the study's: its errors were measured on them (--force or not)."""
    if settings.get("data_hash") not in (None, data_hash):
        raise UserError(f"study {study_name!r}: the validation data here differ from the study's (data hash "
                        f"{data_hash}, the study has {settings['data_hash']}); give the same --data/--shape/--int-range, "
                        "or use a new --study name for new data (--force cannot change them)")
