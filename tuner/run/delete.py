"""`tuner delete`: a study and every file the tuner made for it (its engines folder, trials log, artifacts and
lock files; its SQLite file where no other study is left in it), listed with their disk use before anything goes."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

import optuna

from ..errors import UserError
from ..inputs.user_paths import dir_bytes
from ..store.artifacts import engine_records, remove_engines, resolve_store
from ..store.optuna_private import storage_of
from ..store.storage import StorageURL
from .options import engines_dir, trials_log
from .tune import study_run_lock


@dataclass(frozen=True)
class Removal:
    """One thing `tuner delete` removes: what it is, where, and the bytes it holds on this host (None: elsewhere)."""

    what: str
    where: str
    bytes: int | None
    kind: str = "file"  # "study": its records; "artifacts": removed through their store; "file": a path here


def total_bytes(removals: list[Removal]) -> int:
    """What the removals hold on this host, in bytes."""
    return sum(r.bytes or 0 for r in removals)


def _size(path: str) -> int:
    return dir_bytes(path) if os.path.isdir(path) else os.path.getsize(path)


def study_files(study: optuna.Study, url: str) -> list[Removal]:
    """What deleting the study removes, the study's own records first."""
    name = study.study_name
    out = [Removal(f"study {name} ({len(study.get_trials(deepcopy=False))} trials)", url, None, "study")]
    engines = engines_dir(name, url)
    for what, path in (("trial engines", engines), ("trials log", trials_log(name, engines))):
        if os.path.exists(path):
            out.append(Removal(what, path, _size(path)))
    store, records = resolve_store(study), engine_records(study)
    if store is not None and records:
        held = sum(r.get("bytes", 0) for r in records)
        out.append(Removal(f"{len(records)} engine artifacts", store.url, held, "artifacts"))
    url = StorageURL(url)
    path = url.path  # the study's file
    if path is not None:
        for lock in (url.run_lock(name), url.claim_lock(name)):
            if os.path.exists(lock):
                out.append(Removal("lock file", lock, _size(lock)))
        others = [s for s in optuna.get_all_study_names(storage_of(study)) if s != name]
        if not others:
            files = [p for p in (path, path + "-wal", path + "-shm") if os.path.exists(p)]
            out += [Removal("study file (no other study in it)", p, _size(p)) for p in files]
    return out


def delete_study(study: optuna.Study, url: str, removals: list[Removal]) -> None:
    """Remove what study_files listed: the artifacts first (their records are in the study), then the study,
    then the files. Refused while a run holds the study."""
    name = study.study_name
    with study_run_lock(url, name) as alone:
        lock = StorageURL(url).run_lock(name)
        if lock is not None and not alone:
            raise UserError(f"study {name!r} is being tuned (a run holds {lock}); "
                            "stop it first, then delete")
        store = resolve_store(study)
        if store is not None:
            remove_engines(study, store, engine_records(study))
            if store.folder is not None and os.path.isdir(store.folder) and not os.listdir(store.folder):
                os.rmdir(store.folder)
        optuna.delete_study(study_name=name, storage=storage_of(study))
    for r in removals:
        if r.kind != "file" or not os.path.exists(r.where):
            continue
        if os.path.isdir(r.where):
            shutil.rmtree(r.where)
        else:
            os.remove(r.where)
