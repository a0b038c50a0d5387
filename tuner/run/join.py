"""Join an existing study as a worker (a local `--jobs` process or `tuner worker` on any host): its
stored settings, its files found here with the same content, and this machine's fingerprint."""
from __future__ import annotations

import os
from dataclasses import asdict

from ..backends.base import backend_devices, backend_versions
from ..errors import UserError
from ..machine import fingerprint, machine_id, same_machine
from ..model import model_hash
from ..search.samplers import make_sampler
from ..search.settings import SETTINGS_ATTR, check_data, file_hash, problem_spec
from ..search.study import StudyContext, load_existing
from ..space import SPACES_DIR
from ..storage import check_study_name, open_storage


def _localize(name: str, settings: dict, key: str, given: str | None, what: str, flag: str, hash_key: str | None,
              hash_fn) -> None:
    """Point settings[key] at the local file: the given one, else the stored path; hashes must match."""
    if given is None:
        path = settings.get(key)
        if path is None:
            return
        if not os.path.isfile(path):
            alt = _packaged_space(settings, path) if key == "space_path" else None
            if alt is None:
                raise UserError(f"study {name!r}: its {what} {path} is not on this host; pass it with {flag} PATH")
            path = alt
    else:
        if not os.path.isfile(given):
            raise UserError(f"{flag} {given}: no such file")
        path = os.path.abspath(given)
    if hash_key and settings.get(hash_key) and hash_fn(path) != settings[hash_key]:
        raise UserError(f"study {name!r}: {path} is not the study's {what} ({hash_key} {hash_fn(path)}, the study has "
                        f"{settings[hash_key]}); refusing to join: give the same file with {flag}")
    settings[key] = path


def _packaged_space(settings: dict, stored: str) -> str | None:
    """A built-in space stored under another install's path: the same file of this install."""
    alt = os.path.join(SPACES_DIR, os.path.basename(stored))
    return alt if os.path.isfile(alt) and file_hash(alt) == settings.get("space_hash") else None


def this_machine(space) -> dict:
    """This machine's fingerprint with the versions and devices of the space's backends."""
    return fingerprint(backend_versions(space.backends), backend_devices(space.backends))


def join_study(url: str, name: str, worker: int = 0, model: str | None = None, data: str | None = None,
               space: str | None = None, calib_data: str | None = None,
               allow_other_machine: bool = False) -> tuple[StudyContext, bool]:
    """(the study with local paths and this machine, whether this machine differs from the study's).
    Nothing is written to the study."""
    study = load_existing(check_study_name(name), open_storage(url, create=False))
    if study is None:
        raise UserError(f"no study {name!r} in {url}; create it first: tuner tune MODEL.onnx --study {name} --storage URL")
    settings = dict(study.user_attrs.get(SETTINGS_ATTR) or {})
    if not settings:
        raise UserError(f"study {name!r} was not made by engine-tuner (no {SETTINGS_ATTR}); create it with tuner tune")
    _localize(name, settings, "model_path", model, "model", "--model", "model_hash", model_hash)
    _localize(name, settings, "space_path", space, "space file", "--space", "space_hash", file_hash)
    _localize(name, settings, "data", data, "validation data", "--data", None, None)
    _localize(name, settings, "calib_data", calib_data, "calibration data", "--calib-data", None, None)
    problem = problem_spec(settings).load()
    check_data(name, settings, problem.data_hash)
    here = this_machine(problem.space)
    other = not same_machine(settings["machine"], here)
    if other and not allow_other_machine:
        theirs = settings["machine"]
        raise UserError(f"study {name!r} was timed on another machine ({theirs.get('cpu')}, {theirs.get('cores')} cores, "
                        f"machine {machine_id(theirs)}; this is {here.get('cpu')}, {here.get('cores')} cores, machine "
                        f"{machine_id(here)}): latencies would not compare; add --allow-other-machine to join anyway "
                        "(this machine then gets its own baseline)")
    settings["study_machine"] = settings["machine"]
    settings["machine"] = here  # trials run here carry this machine's fingerprint
    settings["spec"] = asdict(problem_spec(settings))
    study.sampler = make_sampler(settings, problem.space, worker=worker)
    return StudyContext(study, settings, problem, url), other
