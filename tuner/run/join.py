"""Join an existing study as a worker (a local `--jobs` process or `tuner worker` on any host): its
stored settings, its files found here with the same content, and this machine's fingerprint."""
from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import replace

from ..backends.base import backend_devices, backend_versions
from ..errors import UserError
from ..inputs.data import refs_hash, refs_part
from ..inputs.model import model_hash
from ..inputs.space import SPACES_DIR
from ..measure.machine import fingerprint, machine_id, same_machine
from ..problem.spec import LoadedSpec, Problem, ProblemSpec
from ..search.samplers import make_sampler
from ..search.settings import SETTINGS_ATTR, StudySettings, allowed_metrics, check_data, check_metrics, file_hash
from ..search.study import StudyContext, load_existing, stored_settings
from ..store.storage import check_study_name, open_storage


def _localized(name: str, settings: StudySettings, key: str, given: str | None, what: str, flag: str,
               hash_key: str | None = None, hash_fn=None) -> str | None:
    """The local path of the study's file `key`: the given one, else the stored path; hashes must match. A
    file the study was made without cannot be given: it would be other data (search.settings.check_data)."""
    if given is not None and settings.value(key) is None:
        raise UserError(f"{flag} {given}: study {name!r} was made without {flag}, so it has no {what} to relocate; "
                        f"run the worker without {flag} (other {what} need a new study)")
    if given is None:
        path = settings.value(key)
        if path is None:
            return None
        if not os.path.isfile(path):
            alt = _packaged_space(settings, path) if key == "space_path" else None
            if alt is None:
                raise UserError(f"study {name!r}: its {what} {path} is not on this host; pass it with {flag} PATH")
            path = alt
    else:
        if not os.path.isfile(given):
            raise UserError(f"{flag} {given}: no such file")
        path = os.path.abspath(given)
    stored_hash = settings.value(hash_key) if hash_key else None
    if stored_hash and hash_fn(path) != stored_hash:
        raise UserError(f"study {name!r}: {path} is not the study's {what} ({hash_key} {hash_fn(path)}, the study "
                        f"has {stored_hash}); refusing to join: give the same file with {flag}")
    return path


def _packaged_space(settings: StudySettings, stored: str) -> str | None:
    """A built-in space stored under another install's path: the same file of this install."""
    alt = os.path.join(SPACES_DIR, os.path.basename(stored))
    return alt if os.path.isfile(alt) and file_hash(alt) == settings.space_hash else None


def _check_ref_outputs(name: str, settings: StudySettings, problem: Problem) -> None:
    """The reference outputs here are the study's: the study's data hash ends in their hash
    (problem.load_problem), so a changed file is named as such, not as other validation data."""
    if settings.data_hash is None or not problem.refs or settings.data_hash == problem.data_hash:
        return
    mine, theirs = refs_hash(problem.refs), refs_part(settings.data_hash)
    if theirs is not None and mine != theirs:  # else other validation data: check_data says so
        raise UserError(f"study {name!r}: {problem.spec.ref_outputs} is not the study's reference outputs (hash {mine}, "
                        f"the study has {theirs}); refusing to join: give the same file with --ref-outputs")


def this_machine(space) -> dict:
    """This machine's fingerprint with the versions and devices of the space's backends."""
    return fingerprint(backend_versions(space.backends), backend_devices(space.backends))


def join_study(url: str, name: str, worker: int = 0, model: str | None = None, data: str | None = None,
               space: str | None = None, calib_data: str | None = None,
               allow_other_machine: bool = False,
               allow_metrics: Iterable[str] | None = None,
               ref_outputs: str | None = None, loaded: LoadedSpec | None = None) -> tuple[StudyContext, bool]:
    """(the study with local paths and this machine, whether this machine differs from the study's).
    Nothing is written to the study. allow_metrics: the user metrics this worker's command line allows
    (`tuner worker --allow-metric`, or the allowance of the `tuner tune` that started a local worker); None:
    checked already in this process, so only their files' hashes are checked again here. model, data, space,
    calib_data, ref_outputs: the study's files where this host has them elsewhere (None: the stored path). loaded:
    the problem as the process that started this worker loaded it (a local --jobs worker: the same host and files),
    trusted: its requirement and space are used and the model is not hashed again (the paths stay the stored ones)."""
    study = load_existing(check_study_name(name), open_storage(url, create=False))
    if study is None:
        raise UserError(f"no study {name!r} in {url}; create it first: tuner tune MODEL.onnx --study {name} --storage URL")
    # its user metrics: check_metrics, below
    settings = stored_settings(study, load_user_metrics=False, requirement=loaded.requirement if loaded else None)
    if settings is None:
        raise UserError(f"study {name!r} was not made by engine-tuner (no {SETTINGS_ATTR}); create it with tuner tune")
    if settings.rankings_for is None:  # created, its analysis not finished: the params it ranks do not exist yet
        raise UserError(f"study {name!r} is still in its per-layer analysis (or was stopped during it: `tuner tune "
                        f"--study {name}` resumes it); start workers once its trials have begun")
    settings = check_metrics(name, settings, None if allow_metrics is None else allowed_metrics(allow_metrics))
    if loaded is not None:
        problem = loaded.load()
        settings = replace(settings, spec=loaded.spec)
    else:
        settings = replace(settings, spec=_local_spec(name, settings, model, data, space, calib_data, ref_outputs))
        problem = settings.spec.load(settings.requirement)
    _check_ref_outputs(name, settings, problem)
    check_data(name, settings, problem.data_hash)
    here = this_machine(problem.space)
    other = not same_machine(settings.machine, here)
    if other and not allow_other_machine:
        theirs = settings.machine
        raise UserError(f"study {name!r} was timed on another machine ({theirs.get('cpu')}, {theirs.get('cores')} cores, "
                        f"machine {machine_id(theirs)}; this is {here.get('cpu')}, {here.get('cores')} cores, machine "
                        f"{machine_id(here)}): latencies would not compare; add --allow-other-machine to join anyway "
                        "(this machine then gets its own baseline)")
    # trials run here carry this machine's fingerprint
    settings = replace(settings, study_machine=settings.machine, machine=here)
    study.sampler = make_sampler(settings, problem.space, worker=worker)
    return StudyContext(study, settings, problem, url), other


def _local_spec(name: str, settings: StudySettings, model: str | None, data: str | None, space: str | None,
                calib_data: str | None, ref_outputs: str | None) -> ProblemSpec:
    """The study's spec with this host's files (the given paths, else the stored ones), their hashes checked."""
    local = {"model_path": _localized(name, settings, "model_path", model, "model", "--model", "model_hash", model_hash),
             "space_path": _localized(name, settings, "space_path", space, "space file", "--space", "space_hash",
                                      file_hash),
             "data": _localized(name, settings, "data", data, "validation data", "--data"),
             "calib_data": _localized(name, settings, "calib_data", calib_data, "calibration data", "--calib-data"),
             "ref_outputs": _localized(name, settings, "ref_outputs", ref_outputs, "reference outputs",
                                       "--ref-outputs")}
    return replace(settings.spec, **local)
