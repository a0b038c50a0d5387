"""Engines as Optuna artifacts. The engines selection timed side by side (and, for a study tuned with
--keep-engines, every trial's kept engine) are packed into one deterministic tar each and uploaded to
the study's artifact store with their sha256; `tuner export` downloads the winner's instead of
rebuilding it, so it writes the very bytes that were timed, on any host that reaches the store.

The store: `--artifacts DIR_OR_URL` (tune, select; stored in the study), else a folder STUDY-artifacts
beside a SQLite or journal file; a study in a database server without one keeps no engines (export
rebuilds). A folder is Optuna's FileSystemArtifactStore; s3://BUCKET[/PREFIX] and gs://BUCKET[/PREFIX]
are its Boto3ArtifactStore and GCSArtifactStore (boto3 / google-cloud-storage installed, credentials
from their usual environment). Each artifact's record is a study user attr of its own
(ENGINE_PREFIX + id: trial, sha256 of the tar and of each file, bytes), so workers never race on one key;
a removed artifact's record is set to None (Optuna cannot delete a user attr)."""
from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from typing import Any, BinaryIO

import optuna
from optuna.artifacts import download_artifact, upload_artifact
from optuna.artifacts.exceptions import ArtifactNotFound

from ..errors import UserError
from ..inputs.user_paths import dir_bytes
from .optuna_private import storage_of
from .storage import StorageURL, url_of

# {"url": the --artifacts given (None: the default), "keep": --keep-artifacts (search.choices.KEEP_ARTIFACTS)}
STORE_ATTR = "artifact_store"
ENGINE_PREFIX = "engine_artifact:"  # + artifact id: the record of one uploaded engine, None once removed
SELECTION, TRIAL = "selection", "trial"  # where the uploaded engine was timed
_CHUNK = 1 << 20



@dataclass(frozen=True)
class StoreRef:
    """Where a study's engines go: `url` a folder (absolute), s3://... or gs://...; `default`: the folder
    beside the study's file (found again from the file wherever it is, never stored)."""

    url: str
    default: bool = False

    def open(self) -> Any:
        """Optuna's ArtifactStore (open_reader, write, remove) for the url."""
        return open_store(self.url)

    @property
    def folder(self) -> str | None:
        return None if self.url.startswith(("s3://", "gs://")) else self.url


class _Prefixed:
    """An ArtifactStore whose ids live under a prefix of a bucket (s3://BUCKET/PREFIX)."""

    def __init__(self, store, prefix: str):
        self.store, self.prefix = store, prefix.strip("/") + "/"

    def open_reader(self, artifact_id: str) -> BinaryIO:
        return self.store.open_reader(self.prefix + artifact_id)

    def write(self, artifact_id: str, content_body: BinaryIO) -> None:
        self.store.write(self.prefix + artifact_id, content_body)

    def remove(self, artifact_id: str) -> None:
        self.store.remove(self.prefix + artifact_id)


def normalize_url(url: str) -> str:
    """A folder becomes absolute (file:// dropped); s3:// and gs:// URLs stay as given."""
    url = url.strip()
    if url.startswith(("s3://", "gs://")):
        if not url[5:].split("/", 1)[0]:
            raise UserError(f"--artifacts {url}: no bucket; write s3://BUCKET[/PREFIX] or gs://BUCKET[/PREFIX]")
        return url.rstrip("/")
    if "://" in url and not url.startswith("file://"):
        raise UserError(f"--artifacts {url}: unknown kind; give a folder, s3://BUCKET[/PREFIX] or gs://BUCKET[/PREFIX]")
    return os.path.abspath(url[len("file://"):] if url.startswith("file://") else url)


def open_store(url: str) -> Any:
    """Optuna's artifact store at url (normalize_url's form); a folder is made where missing."""
    if url.startswith(("s3://", "gs://")):
        bucket, _, prefix = url[5:].partition("/")
        try:
            if url.startswith("s3://"):
                store = optuna.artifacts.Boto3ArtifactStore(bucket)
            else:
                store = optuna.artifacts.GCSArtifactStore(bucket)
        except ImportError as exc:
            lib = "boto3" if url.startswith("s3://") else "google-cloud-storage"
            raise UserError(f"--artifacts {url}: needs {lib} (pip install {lib}): {exc}") from None
        return _Prefixed(store, prefix) if prefix else store
    try:
        os.makedirs(url, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--artifacts {url}: cannot make the folder ({exc.strerror or exc})") from None
    return optuna.artifacts.FileSystemArtifactStore(url)


def storage_file(study: optuna.Study) -> str | None:
    """The SQLite or journal file a study is stored in; None for a database server or in memory.
    (Optuna keeps no URL on a Study: read from its storage.)"""
    url = url_of(storage_of(study))
    return StorageURL(url).path if url else None


def default_folder(study_file: str, study: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(study_file)), f"{study}-artifacts")


def _store_record(study: optuna.Study) -> dict:
    """The study's artifact-store record ({"url": ..., "keep": ...}); {} where none is stored (or another tool
    stored something else under its name). This module's own attribute: search.record reads the rest."""
    stored = study.user_attrs.get(STORE_ATTR)
    return stored if isinstance(stored, dict) else {}


def resolve_store(study: optuna.Study, url: str | None = None) -> StoreRef | None:
    """The study's artifact store: url (--artifacts on this command), else the one `given` for this
    tune, else the stored one, else the folder beside its file; None for a database server without one."""
    url = url or _store_record(study).get("url")
    if url:
        return StoreRef(normalize_url(url))
    path = storage_file(study)
    return StoreRef(default_folder(path, study.study_name), default=True) if path else None


def stored_keep(study: optuna.Study) -> str | None:
    """The study's --keep-artifacts; None where none is stored. A study stored before the choice: "all"
    where it kept every engine (keep_all), else "finalists", what selection kept then."""
    stored = _store_record(study)
    if not stored:
        return None
    if isinstance(stored.get("keep"), str):
        return stored["keep"]
    return "all" if stored.get("keep_all") else "finalists"


def remember_store(study: optuna.Study, url: str | None, keep: str) -> StoreRef | None:
    """resolve_store for a command that uploads (tune, select): an --artifacts given is stored in the
    study, so export and status on other hosts find it; so is what the store keeps (--keep-artifacts)."""
    stored = _store_record(study)
    want = {"url": normalize_url(url) if url else stored.get("url"), "keep": keep}
    if want != {"url": stored.get("url"), "keep": stored.get("keep")}:
        study.set_user_attr(STORE_ATTR, want)
    return resolve_store(study, url)


# ---- packing: one deterministic tar per engine (sorted names, no times, owners or modes of the host)

def file_digests(folder: str) -> dict[str, str]:
    """{path relative to folder: sha256} of every file under it, sorted."""
    out = {}
    for root, _, files in os.walk(folder):
        for f in files:
            path = os.path.join(root, f)
            out[os.path.relpath(path, folder).replace(os.sep, "/")] = sha256_of(path)
    return dict(sorted(out.items()))


def sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def pack(folder: str, tar_path: str, names: list[str] | None = None) -> None:
    """The files under folder into an uncompressed tar that depends on their names and bytes only. names:
    their paths relative to folder, where the caller has them already (file_digests reads every byte)."""
    with tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) as tar:
        for rel in sorted(names if names is not None else file_digests(folder)):
            info = tarfile.TarInfo(rel)
            info.size = os.path.getsize(os.path.join(folder, rel))
            info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = 0, 0o644, 0, 0, "", ""
            with open(os.path.join(folder, rel), "rb") as f:
                tar.addfile(info, f)


def unpack(tar_path: str, folder: str) -> None:
    """Regular files only, each inside folder (a member naming an absolute path or '..' is refused)."""
    os.makedirs(folder, exist_ok=True)
    with tarfile.open(tar_path, "r:") as tar:
        for m in tar.getmembers():
            parts = m.name.split("/")
            if not m.isfile() or os.path.isabs(m.name) or ".." in parts or not m.name:
                raise ValueError(f"unexpected member {m.name!r}")
            dest = os.path.join(folder, *parts)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            src = tar.extractfile(m)
            with src, open(dest, "xb") as out:
                while chunk := src.read(_CHUNK):
                    out.write(chunk)


# ---- upload, list, remove

def upload_engine(study: optuna.Study, store: StoreRef, engine_dir: str, trial: int, source: str,
                  main: str | None = None) -> dict:
    """Pack engine_dir, upload it as an artifact of the study and record it; returns the record:
    {"id", "trial", "source", "sha256" (the tar's), "files" ({name: sha256}), "bytes", "main", ...}."""
    files = file_digests(engine_dir)
    with tempfile.TemporaryDirectory(prefix="tuner-pack-") as tmp:
        tar = os.path.join(tmp, f"trial-{trial}-{source}-engine.tar")
        pack(engine_dir, tar, list(files))
        digest, size = sha256_of(tar), os.path.getsize(tar)
        artifact_id = upload_artifact(artifact_store=store.open(), file_path=tar, study_or_trial=study,
                                      mimetype="application/x-tar")
    record = {"id": artifact_id, "trial": trial, "source": source, "sha256": digest, "bytes": size, "files": files,
              "main": main, "store": store.url, "host": socket.gethostname(), "uploaded_at": time.time()}
    study.set_user_attr(ENGINE_PREFIX + artifact_id, record)
    return record


def engine_records(study: optuna.Study) -> list[dict]:
    """Every engine artifact the study holds (removed ones left out), oldest first."""
    recs = [v for k, v in study.user_attrs.items() if k.startswith(ENGINE_PREFIX) and isinstance(v, dict)]
    return sorted(recs, key=lambda r: r.get("uploaded_at", 0))


def remove_engines(study: optuna.Study, store: StoreRef, records: list[dict]) -> int:
    """Remove these artifacts from the store and mark their records removed; returns how many went."""
    opened, n = store.open(), 0
    for rec in records:
        with contextlib.suppress(ArtifactNotFound, FileNotFoundError):
            opened.remove(rec["id"])
        study.set_user_attr(ENGINE_PREFIX + rec["id"], None)
        n += 1
    return n


def selection_engines(study: optuna.Study) -> list[dict]:
    """The engines selections uploaded (source SELECTION) that the study still holds, oldest first."""
    return [r for r in engine_records(study) if r.get("source") == SELECTION]


def drop_selection_engines(study: optuna.Study, store: StoreRef | None, keep_all: bool,
                           records: list[dict] | None = None) -> int:
    """Remove the engines of earlier selections, no one's once a selection ends (with a winner, its own replace
    them): `records` (selection_engines as they were before this selection uploaded), None: all the study holds
    now. Nothing goes where the study keeps every engine (keep_all, --keep-engines) or has no store, and the
    store is not opened when there is nothing to remove. Returns how many went."""
    if store is None or keep_all:
        return 0
    records = selection_engines(study) if records is None else records
    return remove_engines(study, store, records) if records else 0


def upload_kept_engines(study: optuna.Study, store: StoreRef, kept: dict[int, str | None]) -> list[dict]:
    """Trials tuned with --keep-engines (kept: trial number -> the engine folder it stored, read by the caller
    from the trial records) whose folder is on this host and not uploaded yet: each uploaded as it was timed
    (source "trial"). Returns the new records."""
    done = {r["trial"] for r in engine_records(study) if r.get("source") == TRIAL}
    out = []
    for number, folder in sorted(kept.items()):
        if number in done or not folder or not os.path.isdir(folder) or not os.listdir(folder):
            continue
        out.append(upload_engine(study, store, folder, number, TRIAL))
    return out


def engine_of(study: optuna.Study, chosen: dict) -> dict | None:
    """The artifact export takes for `chosen` (the winner or best-effort summary): the one selection timed,
    recorded in it, while the study still holds it; else the trial's kept engine; None: none."""
    live = {r["id"]: r for r in engine_records(study)}
    rec = chosen.get("engine_artifact")
    if rec and rec.get("id") in live:
        return live[rec["id"]]
    kept = [r for r in live.values() if r["trial"] == chosen.get("trial") and r.get("source") == TRIAL]
    return kept[-1] if kept else None


def fetch_engine(store: StoreRef, record: dict, folder: str) -> None:
    """Download the artifact, check its sha256, unpack it into folder (new or empty) and check every
    file's sha256 against the record. A missing or changed artifact is a UserError naming --rebuild."""
    where = f"engine artifact {record['id']} (trial {record['trial']}) in {store.url}"
    with tempfile.TemporaryDirectory(prefix="tuner-fetch-") as tmp:
        tar = os.path.join(tmp, "engine.tar")
        try:
            download_artifact(artifact_store=store.open(), file_path=tar, artifact_id=record["id"])
        except (ArtifactNotFound, FileNotFoundError) as exc:
            raise UserError(f"the {where} is missing ({exc}); give --artifacts where the study's artifacts are, or "
                            "--rebuild to build the engine again from its config") from None
        if sha256_of(tar) != record["sha256"]:
            raise UserError(f"the {where} does not have the sha256 recorded at upload (changed or truncated); "
                            "--rebuild builds the engine again from its config")
        try:
            unpack(tar, folder)
        except (ValueError, tarfile.TarError) as exc:
            raise UserError(f"the {where} is not an engine tar ({exc}); --rebuild builds it again") from None
    check_files(folder, record)


def check_files(folder: str, record: dict) -> None:
    got = file_digests(folder)
    if got != record["files"]:
        bad = sorted(set(got) ^ set(record["files"]) | {f for f in got if got[f] != record["files"].get(f)})
        raise UserError(f"engine artifact {record['id']}: {bad[0]} differs from the file uploaded at timing; "
                        "--rebuild builds the engine again from its config")


def usage(study: optuna.Study, store: StoreRef | None) -> str:
    """One line for `tuner status`: how many engine artifacts the study holds and the disk they take."""
    recs = engine_records(study)
    if store is None:
        return ("artifacts: none - the study is in a database server and has no artifact store "
                "(tune/select --artifacts DIR_OR_URL keeps the timed engines; export rebuilds)")
    if store.folder is not None and os.path.isdir(store.folder):
        size = dir_bytes(store.folder)
    else:
        size = sum(r.get("bytes", 0) for r in recs)
    if not recs and not size:
        return f"artifacts: none yet in {store.url}"
    sel = sum(1 for r in recs if r.get("source") == SELECTION)
    return (f"artifacts: {len(recs)} engine{'s' if len(recs) != 1 else ''} ({sel} timed in selection, "
            f"{len(recs) - sel} kept trial engines), {size / 1e6:.1f} MB in {store.url}"
            + (f"; --keep-artifacts {stored_keep(study)}" if stored_keep(study) else ""))


def note(text: str) -> None:
    print(f"note: {text}", file=sys.stderr)
