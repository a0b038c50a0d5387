"""Exclusive timing per device across processes: an flock on a file, released by the kernel if the holder dies."""
from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator

LOCK_DIR_ENV = "TUNER_LOCK_DIR"


def default_lock_path(device: str = "cpu") -> str:
    """One lock per device and user on this machine, shared by every study and worker. TUNER_LOCK_DIR
    moves it (read each time): a test session keeps its timings to itself with its own directory."""
    folder = os.environ.get(LOCK_DIR_ENV) or tempfile.gettempdir()
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, f"engine-tuner-{os.getuid()}-{device}.lock")


@contextlib.contextmanager
def device_lock(path: str | None) -> Iterator[None]:
    """Hold the lock at `path` for the duration; no-op when path is None."""
    if path is None:
        yield
        return
    with open(path, "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def directory_lock(path: str) -> Iterator[None]:
    """Hold an flock on the directory itself: serializes processes that set up a file in it without
    leaving a lock file behind (and without touching the file, whose own locks SQLite manages)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock
