"""Run one candidate in a child process with a time limit, so crashes and hangs fail only that trial.

The child comes from a forkserver: it starts fast (the server has the heavy modules imported) and
never inherits the parent's ONNX Runtime threads. It reports its phase as it goes, so a failure
says where it happened ("killed by signal 11 (SIGSEGV) during calibration").
"""
from __future__ import annotations

import multiprocessing as mp
import signal
import time
import traceback
from typing import Any, Callable

_CTX = None


class TrialFailure(Exception):
    """The candidate could not be built or measured; the message is the reason stored in the trial."""


def _context():
    global _CTX
    if _CTX is None:
        _CTX = mp.get_context("forkserver")
        _CTX.set_forkserver_preload(["tuner.evaluate"])
    return _CTX


def _quiet_child() -> None:
    """ORT's quantization tools print progress and warn through the root logger: keep trials' output clean."""
    import logging
    import os

    logging.getLogger().setLevel(logging.ERROR)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def _child(conn, fn: Callable, kwargs: dict) -> None:
    # Ctrl-C reaches the whole process group: the parent fails the trial and ends this child.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _quiet_child()

    def on_phase(name: str) -> None:
        conn.send(("phase", name))

    try:
        result = fn(on_phase=on_phase, **kwargs)
        conn.send(("ok", result))
    except BaseException as exc:  # everything goes back to the parent as a reason
        last = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
        where = f" at {last[0].filename.rsplit('/', 1)[-1]}:{last[0].lineno}" if last else ""
        conn.send(("error", f"{type(exc).__name__}: {exc}{where}"))
    finally:
        conn.close()


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return "unknown"


def run_isolated(fn: Callable, kwargs: dict, timeout_s: float) -> Any:
    """Call fn(on_phase=..., **kwargs) in a child; return its result or raise TrialFailure with the reason."""
    ctx = _context()
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, fn, kwargs), daemon=True)
    proc.start()
    child.close()
    phase = "start-up"
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TrialFailure(f"timed out after {timeout_s:g} s during {phase}")
            try:
                if not parent.poll(min(left, 1.0)):
                    continue
                kind, value = parent.recv()
            except EOFError:  # the child died without a word
                proc.join(5)
                code = proc.exitcode
                if code is not None and code < 0:
                    raise TrialFailure(f"killed by signal {-code} ({_signal_name(-code)}) during {phase}") from None
                raise TrialFailure(f"child process exited with code {code} during {phase}") from None
            if kind == "phase":
                phase = value
            elif kind == "ok":
                return value
            else:
                raise TrialFailure(f"{value} (during {phase})")
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        parent.close()
