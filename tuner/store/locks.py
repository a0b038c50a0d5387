"""Exclusive timing per device across processes: an flock on a file, released by the kernel if the holder dies."""
from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

from ..errors import JobPhase

LOCK_DIR_ENV = "TUNER_LOCK_DIR"


def default_lock_path(device: str = "cpu") -> str:
    """One lock per device and user on this machine, shared by every study and worker. TUNER_LOCK_DIR
    moves it (read each time): a test session keeps its timings to itself with its own directory."""
    folder = os.environ.get(LOCK_DIR_ENV) or tempfile.gettempdir()
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, f"engine-tuner-{os.getuid()}-{device}.lock")


@contextlib.contextmanager
def device_lock(path: str | None, holder: str = "", on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the lock at `path` for the duration; no-op when path is None. The holder writes who it is into
    the file (`holder`, e.g. "PID 123, study bert"), so that one who must wait can say for whom: on_wait gets
    that text before it blocks."""
    if path is None:
        yield
        return
    with open(path, "a+") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                f.seek(0)
                on_wait(f.read(200).strip() or "another process")
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        f.seek(0)
        f.truncate()
        f.write(holder or f"PID {os.getpid()}")
        f.flush()
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def timing_lock(device: str, on_phase: Callable[[str], None] | None, study: str | None = None,
                what: str = "a trial") -> contextlib.AbstractContextManager[None]:
    """device_lock on the device's timing lock (default_lock_path), for every timing: the holder writes
    "PID n, WHAT of study S" (what: "a trial", "selection", "verify", ...), and one that must wait reports
    the phase f"{JobPhase.WAITING_FOR_LOCK}, held by HOLDER" through on_phase (TimingLockWaits reads it; None: not
    reported)."""
    holder = f"PID {os.getpid()}" + (f", {what} of study {study}" if study else f", {what}")
    on_wait = None if on_phase is None else (lambda who: on_phase(f"{JobPhase.WAITING_FOR_LOCK}, held by {who}"))
    return device_lock(default_lock_path(device), holder, on_wait)


class TimingLockWaits:
    """The parent's view of its trials' waits for the timing lock (their phases, tuner.execute.isolate): says once
    per holder from another study that this study waits, even under --quiet, and adds up the seconds waited
    for other studies, which a progress ETA leaves out (a wait for this study's own workers is its pace)."""

    def __init__(self, study: str, clock: Callable[[], float] = time.monotonic,
                 say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)):
        self.study, self._clock, self._say = study, clock, say
        self._told: set[str] = set()
        self._since: float | None = None
        self._waited = 0.0

    def on_phase(self, phase: str) -> None:
        if self._since is not None:
            self._waited += self._clock() - self._since
            self._since = None
        if not phase.startswith(f"{JobPhase.WAITING_FOR_LOCK}, held by "):
            return
        holder = phase[len(f"{JobPhase.WAITING_FOR_LOCK}, held by "):]
        if self.study and holder.endswith(f"study {self.study}"):
            return
        self._since = self._clock()
        if holder not in self._told:
            self._told.add(holder)
            self._say(f"note: study {self.study or '-'} waits for the timing lock, held by {holder}: no two "
                      "timings share this machine; its trials go on once the lock is free")

    def take(self) -> float:
        """Seconds waited for other studies since the last take (the running wait up to now included)."""
        if self._since is not None:
            now = self._clock()
            self._waited += now - self._since
            self._since = now
        waited, self._waited = self._waited, 0.0
        return waited


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
