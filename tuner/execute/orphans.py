"""A child process ends when its parent dies, however the parent died (kill -9 included).

Called first thing in every child the tuner starts: the spawned workers of `tune --jobs N`, the
trials' children of a forkserver (tuner.execute.isolate), ORT's optimizer probe. The chain when `tuner tune
--jobs N` is killed: its workers die at once (their parent died); each worker's forkserver sees EOF on
the "alive" pipe only its owner still holds (the trial children close their copy) and exits; the
trial children, whose parent is that forkserver, die with it; multiprocessing's resource tracker ends
once nobody holds its pipe. Before, a trial child busy in a long phase kept itself and its forkserver
running with no parent (the workers themselves already died with the tuner).
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def end_with_parent(parent: int) -> None:
    """Kill this process (SIGKILL) when the process `parent` (its parent's pid, as the parent or the
    fork saw it) is no longer its parent. Linux: the kernel does it (PR_SET_PDEATHSIG). The signal
    follows the parent *thread* that created this process: create children from a thread that lives
    as long as they do (the main thread, or one that waits for them). Elsewhere (macOS): a daemon
    thread checks the parent once a second."""
    by_kernel = _kernel_kills_with_parent()
    if os.getppid() != parent:  # it died before we asked (the kernel sends nothing then): we were reparented
        _die()
    if not by_kernel:
        threading.Thread(target=_watch, args=(parent,), name="end-with-parent", daemon=True).start()


def _kernel_kills_with_parent() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        # CDLL(None): the symbols already loaded, libc among them (glibc or musl); no ldconfig child
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    return prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    _die()


def _die() -> None:
    """As the kernel would: SIGKILL, so no exit handler waits on a parent that is gone."""
    os.kill(os.getpid(), signal.SIGKILL)
