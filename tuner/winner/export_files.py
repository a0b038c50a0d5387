"""The folder `tuner export` writes into: refused when it holds anything (unless --force), and then only
the files an earlier export listed in its manifest are replaced; a file of anyone else is never touched."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile

from ..errors import UserError
from ..inputs.user_paths import check_output_dir

MANIFEST = "export-manifest.json"
STAGING_PREFIX = ".export-"  # the new files are built here, inside the folder, then moved into place


def _files_under(root: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def previous_export(out_dir: str) -> list[str] | None:
    """The files the last export into out_dir wrote, from its manifest; None without a readable one."""
    try:
        with open(os.path.join(out_dir, MANIFEST)) as f:
            files = json.load(f)["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return [p for p in files if isinstance(p, str) and not os.path.isabs(p) and ".." not in p.split(os.sep)]


def check_out_dir(out_dir: str, force: bool) -> None:
    """--out is a new or empty folder, or --force is given; else one line and nothing is written."""
    check_output_dir(out_dir, "--out")
    entries = [e for e in os.listdir(out_dir) if not e.startswith(STAGING_PREFIX)] if os.path.isdir(out_dir) else []
    if entries and not force:
        ours = " (an earlier export: --force replaces its files)" if MANIFEST in entries else ""
        raise UserError(f"--out {out_dir} is not empty{ours}; give a new or empty folder, or --force to replace only "
                        f"the files an earlier export wrote there (listed in its {MANIFEST}); nothing was written")


@contextlib.contextmanager
def staging_dir(out_dir: str):
    """A fresh folder inside out_dir for the new files; removed afterwards (with out_dir, if this made it
    and nothing was installed)."""
    made = not os.path.isdir(out_dir)
    try:
        os.makedirs(out_dir, exist_ok=True)
        for stale in os.listdir(out_dir):  # left by an export that was killed
            if stale.startswith(STAGING_PREFIX):
                shutil.rmtree(os.path.join(out_dir, stale), ignore_errors=True)
        staging = tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=out_dir)
    except OSError as exc:
        raise UserError(f"--out {out_dir}: cannot write there ({exc.strerror or exc})") from None
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if made:
            with contextlib.suppress(OSError):
                os.rmdir(out_dir)  # only when empty: the export failed before installing anything


def install(out_dir: str, staging: str, manifest: dict) -> list[str]:
    """Move the staged files into out_dir: first remove what the previous export listed, refuse to
    overwrite a file no export wrote, then write the manifest of the new files. Returns them."""
    new = _files_under(staging)
    listed = previous_export(out_dir)
    old = set(listed or [])
    there = [f for f in new if os.path.lexists(os.path.join(out_dir, f))]
    if listed is None and os.path.lexists(os.path.join(out_dir, MANIFEST)):
        there.insert(0, MANIFEST)  # a file of that name that no export wrote
    foreign = [f for f in there if f not in old]
    if foreign:
        raise UserError(f"--out {out_dir}: {foreign[0]} is there and no earlier export wrote it (no {MANIFEST} lists "
                        "it); move it away or give another --out; nothing was replaced")
    for f in sorted(old):
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            os.remove(os.path.join(out_dir, f))
        _remove_empty_parents(out_dir, f)
    for f in new:
        os.makedirs(os.path.dirname(os.path.join(out_dir, f)), exist_ok=True)
        os.replace(os.path.join(staging, f), os.path.join(out_dir, f))
    with open(os.path.join(out_dir, MANIFEST), "w") as fh:
        json.dump(manifest | {"files": new}, fh, indent=2)
    return new


def _remove_empty_parents(out_dir: str, rel: str) -> None:
    """Folders that held only export's files go with them (a folder with a user's file stays)."""
    parent = os.path.dirname(rel)
    while parent:
        try:
            os.rmdir(os.path.join(out_dir, parent))
        except OSError:
            return
        parent = os.path.dirname(parent)
