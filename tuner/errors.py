"""User-facing errors (the CLI prints them as one line and exits non-zero, without a traceback), and where a
stop (Ctrl-C, SIGTERM) raises its KeyboardInterrupt: StopGate, below."""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from enum import Enum

# Exit codes besides 0 and 2 (bad input): a run that went through but found nothing usable.
EXIT_ALL_FAILED = 3  # every trial of the study failed
EXIT_NONE_FEASIBLE = 4  # trials completed, none meets the requirement


class UserError(Exception):
    """A mistake the user can fix (bad file, bad flag, bad field). The message says what and how."""


class FailureKind(str, Enum):
    """How a job in a child process failed."""

    ERROR = "error"  # an exception in the job: the same input fails the same way
    TIMEOUT = "timeout"  # its time ran out
    CRASH = "crash"  # the child died (a signal, an exit code)

    __str__ = str.__str__  # the value, in messages and f-strings, on every Python version
    __format__ = str.__format__


class JobPhase(str, Enum):
    """What a job was doing, as engine-tuner names it: the one place for these words. A backend reports phases of
    its own too ("calibration", "compile"), which count as building. A phase may carry more after its name
    ("waiting for the timing lock, held by ..."): `of` reads it. search.failures decides by it what a failure says
    of the route or the config."""

    START_UP = "start-up"
    LOADING = "loading the model and reference"
    WAITING_FOR_LOCK = "waiting for the timing lock"
    TIMING = "timing"
    ACCURACY_CHECK = "accuracy check"
    SAVING = "saving the engine"
    PROFILING = "profiling"

    __str__ = str.__str__
    __format__ = str.__format__

    @classmethod
    def of(cls, phase: str) -> JobPhase | None:
        """The phase of engine-tuner's that `phase` names (or starts with); None for a backend's own."""
        return next((p for p in cls if phase == p.value or phase.startswith((p.value + " ", p.value + ","))), None)


class TrialFailure(Exception):
    """A job in a child process could not be done; the message is the reason (stored as the trial's fail_reason).
    kind: how it failed; phase: what the job was doing (a JobPhase, or a backend's own words)."""

    def __init__(self, message: str, kind: FailureKind = FailureKind.ERROR, phase: str = ""):
        super().__init__(message)
        self.kind, self.phase = FailureKind(kind), phase


class Terminated(KeyboardInterrupt):
    """SIGTERM (what Slurm, `timeout` and systemd send), raised where Ctrl-C's KeyboardInterrupt would be:
    the running trial fails with its reason, the study stays consistent, and the CLI exits 143."""


# ---------------------------------------------------------------- stops
# Ctrl-C and SIGTERM stop a run at a safe point, never inside a storage write.
#
# Python raises KeyboardInterrupt between any two bytecodes. Raised inside Optuna's tell (its `_run_trial`
# catches only Exception there), it left a trial RUNNING and a traceback (UnboundLocalError: updated_state).
# The handler here raises at once where that is safe (building and timing a candidate: minutes, and the
# objective fails the trial with the signal's reason), and only records the signal inside a `deferred()` block
# (the trial loop's Optuna calls, a trial record's write); the block's end, or the next `opened()` block,
# raises it. The first signal decides the exit code (130 or 143).


class StopGate:
    """Where a stop may land. depth > 0: inside deferred blocks, a signal waits in `pending`."""

    def __init__(self):
        self.depth = 0
        self.pending: KeyboardInterrupt | None = None

    def handle(self, signum, frame) -> None:
        exc = Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
        if self.depth:
            self.pending = self.pending or exc
            return
        raise exc

    def safe_point(self) -> None:
        """Raise a signal that came inside a deferred block."""
        if self.pending is not None:
            exc, self.pending = self.pending, None
            raise exc

    @contextmanager
    def deferred(self):
        """A signal inside waits for the end of the outermost deferred block (or an opened() block within)."""
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
        if not self.depth:  # reached only when the block ended without an exception
            self.safe_point()

    @contextmanager
    def opened(self):
        """Inside a deferred block, a stretch where a signal acts at once (the objective's build and timing)."""
        saved, self.depth = self.depth, 0
        try:
            self.safe_point()
            yield
        finally:
            self.depth = saved


GATE = StopGate()


def install_stops() -> tuple | None:
    """Route SIGINT and SIGTERM through GATE (in the main thread only, where handlers may be set); returns the
    handlers it replaced, for restore_stops(), or None where it set none."""
    if threading.current_thread() is not threading.main_thread():
        return None
    GATE.depth, GATE.pending = 0, None  # main() called again in one process (tests, the API) starts clean
    # a SIGINT ignored from the start (a job started with `&` by a script) stays ignored
    sigint = signal.getsignal(signal.SIGINT)
    keep = sigint if sigint is signal.SIG_IGN else GATE.handle
    return signal.signal(signal.SIGINT, keep), signal.signal(signal.SIGTERM, GATE.handle)


def restore_stops(previous: tuple | None) -> None:
    if previous is not None:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
