"""Run jobs in a child process with a time limit, so crashes and hangs fail only that job.

Children come from a forkserver: they start fast (the server has the heavy modules imported) and
never inherit the parent's ONNX Runtime threads. A child reports its phase as it goes, so a failure
says where it happened ("killed by signal 11 (SIGSEGV) during calibration"). An IsolatedRunner
either starts a child per job (trials: each starts clean) or keeps one child for many jobs
(sensitivity: the problem stays loaded), and starts a new one after a crash.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
import traceback
from collections.abc import Callable
from typing import Any

from ..errors import FailureKind, JobPhase, TrialFailure
from .orphans import end_with_parent

_CTX = None
# The process that imported this module: in a child forked from the forkserver (which has it preloaded
# through tuner.execute.jobs), the forkserver, i.e. the child's parent even if that died before the child looked.
_IMPORTED_IN = os.getpid()
# Preloaded into the forkserver (a backend whose library is missing is skipped there).
PRELOAD = ["tuner.execute.jobs", "tuner.backends.onnxruntime.backend", "tuner.backends.openvino.backend"]


def _context():
    global _CTX
    if _CTX is None:
        _CTX = mp.get_context("forkserver")
        _CTX.set_forkserver_preload(PRELOAD)
    return _CTX


def _quiet_child(log_path: str | None = None) -> None:
    """Quantization tools print progress and warn through the root logger: keep the parent's output clean.
    With log_path, what the child writes to stderr (NNCF's numpy warnings, ONNX Runtime's own lines) goes to
    that file, the study's trials log, instead of the terminal: --quiet means quiet."""
    import logging

    logging.getLogger().setLevel(logging.ERROR)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    if log_path:
        try:
            log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError:
            return  # a log that cannot be written: the terminal keeps the lines
        os.dup2(log, 2)
        os.close(log)


def _reason(exc: BaseException) -> str:
    last = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    where = f" at {last[0].filename.rsplit('/', 1)[-1]}:{last[0].lineno}" if last else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _leave_the_forkserver_alive_pipe() -> None:
    """A forkserver exits once every holder of its "alive" pipe has closed it: its owner, and each child
    it forked, which inherits the pipe to start children through it (a job never does; a new one would
    start its own forkserver anyway). Closed here, the forkserver exits when its owner dies, even by
    kill -9, and takes this child with it (end_with_parent); held, the two would wait on each other."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    if forkserver.get_inherited_fds() is None or getattr(server, "_forkserver_alive_fd", None) is None:
        return  # not a forkserver's child
    try:
        os.close(server._forkserver_alive_fd)
    except OSError:
        pass
    server._forkserver_alive_fd = None


def _serve(conn, log_path: str | None = None) -> None:
    """The child: run jobs from the pipe until it closes."""
    # It never outlives its forkserver (whose main thread, the one that forks, lives as long as it does),
    # which never outlives the process that runs the jobs.
    end_with_parent(_IMPORTED_IN if _IMPORTED_IN != os.getpid() else os.getppid())
    _leave_the_forkserver_alive_pipe()
    # Ctrl-C reaches the whole process group: the parent fails the job and ends this child.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _quiet_child(log_path)

    def on_phase(name: str) -> None:
        conn.send(("phase", name))

    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        fn, kwargs = job
        try:
            reply = ("ok", fn(on_phase=on_phase, **kwargs))
        except BaseException as exc:  # everything goes back to the parent as a reason
            reply = ("error", _reason(exc))
        try:
            conn.send(reply)
        except (BrokenPipeError, ConnectionResetError):  # the parent was killed: end without a traceback
            return


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return "unknown"


class IsolatedRunner:
    """Calls fn(on_phase=..., **kwargs) in a child; returns its result or raises TrialFailure."""

    def __init__(self, persistent: bool = False, on_phase: Callable[[str], None] | None = None,
                 log_path: str | None = None):
        """on_phase: told each phase the child reports, as it comes (tuner.store.locks.TimingLockWaits).
        log_path: where the child's stderr goes (the study's trials log); None: the terminal."""
        self.persistent = persistent
        self.on_phase = on_phase
        self.log_path = log_path
        self._proc = None
        self._conn = None

    def call(self, fn: Callable, kwargs: dict, timeout_s: float) -> Any:
        if self._proc is None or not self._proc.is_alive():
            self._start()
        ok = False
        try:
            self._conn.send((fn, kwargs))
            result = self._wait(timeout_s)
            ok = True
            return result
        finally:
            if not (ok and self.persistent):
                self.close()

    def _start(self) -> None:
        ctx = _context()
        self._conn, child = ctx.Pipe(duplex=True)
        self._proc = ctx.Process(target=_serve, args=(child, self.log_path), daemon=True)
        self._proc.start()
        child.close()

    def _wait(self, timeout_s: float) -> Any:
        phase: str = JobPhase.START_UP
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TrialFailure(f"timed out after {timeout_s:g} s during {phase}", FailureKind.TIMEOUT, phase)
            try:
                if not self._conn.poll(min(left, 1.0)):
                    continue
                kind, value = self._conn.recv()
            except (EOFError, ConnectionError):  # the child died without a word
                self._proc.join(5)
                code = self._proc.exitcode
                if code is not None and code < 0:
                    raise TrialFailure(f"killed by signal {-code} ({_signal_name(-code)}) during {phase}", FailureKind.CRASH,
                                       phase) from None
                raise TrialFailure(f"child process exited with code {code} during {phase}", FailureKind.CRASH, phase) from None
            if kind == "phase":
                phase = value
                if self.on_phase is not None:
                    self.on_phase(value)
            elif kind == "ok":
                return value
            else:
                raise TrialFailure(f"{value} (during {phase})", FailureKind.ERROR, phase)

    def close(self) -> None:
        """End the child (idle between jobs, or hung: either way nothing is lost)."""
        if self._proc is None:
            return
        if self._proc.is_alive():
            self._proc.kill()
        self._proc.join(5)
        self._conn.close()
        self._proc = self._conn = None


def run_isolated(fn: Callable, kwargs: dict, timeout_s: float) -> Any:
    """One job in a fresh child."""
    return IsolatedRunner().call(fn, kwargs, timeout_s)
