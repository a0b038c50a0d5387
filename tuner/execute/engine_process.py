"""One saved engine alone in a fresh process of its own, timed through a pipe.

A user deploys one engine in one process, and two runtimes in one process disturb each other (ONNX
Runtime's defaults ran 18 ms alone and 24 ms beside a loaded OpenVINO engine; the OpenVINO engine's own
time did not move). So every engine a trial, selection or verify times is loaded here, from the folder
Engine.save wrote, by its backend alone: a fresh interpreter (not a fork of a process that holds other
runtimes) imports that one backend. The parent sequences the blocks (tuner.measure.paired); the child
times its own runs with its own clock, so the pipe's cost is never inside a sample.

The child ends when the pipe closes, and with its parent however that dies (tuner.execute.orphans).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from multiprocessing.connection import Connection
from typing import Any

from ..backends.base import Batch, ServesConcurrently, load_for_timing
from ..errors import FailureKind, JobPhase, TrialFailure
from ..measure.paired import InProcess
from .orphans import end_with_parent

RUNTIMES = ("onnxruntime", "openvino", "nncf", "tensorrt", "torch")  # what must not share an engine's process
START_TIMEOUT_S = 300.0
# A load that fails says something about the route (an engine that cannot be loaded alone cannot be deployed):
# not one of the phases search/failures.py reads as saying nothing about it.
LOAD_PHASE = "loading the engine alone"  # interpreter, backend import and engine load; a large OpenVINO blob takes seconds


class EngineProcess:
    """The parent's handle on one engine in its own process: warm_run() and block() as measure/paired's
    Timed wants them. pid: the child's process id, recorded so that a test (and a record) can tell which
    process timed what."""

    def __init__(self, backend: str, engine_dir: str, batch: Batch, timeout_s: float = START_TIMEOUT_S,
                 label: str = "engine", in_flight: int = 1):
        """in_flight: requests in flight at once in each timed run (1: one request, the latency; more: the
        throughput, through the engine's ServesConcurrently)."""
        self.backend, self.engine_dir, self.label = backend, engine_dir, label
        self.timeout_s = timeout_s
        mine, theirs = socket.socketpair()
        env = dict(os.environ)
        self._proc = subprocess.Popen([sys.executable, "-m", __name__, str(theirs.fileno()), str(os.getpid())],
                                      pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                                      start_new_session=False)
        theirs.close()
        self._conn = Connection(mine.detach())
        self.pid = self._proc.pid
        try:
            self._ask(("load", backend, engine_dir, batch, in_flight), timeout_s, LOAD_PHASE)
        except BaseException:
            self.close()
            raise

    def _ask(self, message: tuple, timeout_s: float | None = None, phase: str = JobPhase.TIMING) -> Any:
        """The child's answer; TrialFailure (in `phase`) where it has none in time, dies, or raised."""
        wait = timeout_s if timeout_s is not None else self.timeout_s
        try:
            self._conn.send(message)
            if not self._conn.poll(wait):
                raise TrialFailure(f"{self.label} process: no answer in {wait:g} s", FailureKind.TIMEOUT, phase)
            kind, value = self._conn.recv()
        except (EOFError, OSError):
            raise TrialFailure(f"{self.label} process {self._ended()} during {phase}", FailureKind.CRASH, phase) from None
        if kind == "error":
            raise TrialFailure(f"{self.label} process: {value} (during {phase})", FailureKind.ERROR, phase)
        return value

    def _ended(self) -> str:
        try:
            code = self._proc.wait(5)
        except subprocess.TimeoutExpired:
            return "stopped answering"
        if code < 0:
            return f"killed by signal {-code} ({signal.Signals(-code).name})"
        return f"exited with code {code}"

    def warm_run(self) -> float:
        """One untimed-by-protocol run: its wall seconds (the warm-up's estimate of a run's cost)."""
        return self._ask(("warm",))

    def block(self, runs: int) -> list[float]:
        """An untimed lead-in, then `runs` timed runs: their ms (measure/paired.run_block, in the child)."""
        return self._ask(("block", runs))

    def runtimes(self) -> list[str]:
        """The inference libraries imported in the child (a test's check that it holds one runtime alone)."""
        return self._ask(("runtimes",))

    def close(self) -> None:
        """End the child: the pipe closes (it exits), then it is killed if it has not."""
        if self._proc is None:
            return
        try:
            self._conn.close()
        except OSError:
            pass
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def __enter__(self) -> EngineProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _serve(conn: Connection) -> None:
    """The child: load the engine, stage the batch, then answer warm and block requests until the pipe closes."""
    engine = timed = None
    try:
        while True:
            try:
                message = conn.recv()
            except EOFError:
                return
            try:
                if message[0] == "load":
                    _, backend, engine_dir, batch, in_flight = message
                    engine = load_for_timing(backend, engine_dir)
                    timed = InProcess(_runs(engine, backend, batch, in_flight))
                    reply: Any = os.getpid()
                elif message[0] == "runtimes":
                    reply = sorted(m for m in RUNTIMES if m in sys.modules)
                elif message[0] == "warm":
                    reply = timed.warm_run()
                else:
                    reply = timed.block(message[1])
                conn.send(("ok", reply))
            except Exception as exc:  # noqa: BLE001  the parent fails the timing with this reason
                conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        if engine is not None:
            engine.close()


def _runs(engine, backend: str, batch: Batch, in_flight: int):
    """What one timed run is: one request (the same runs as an engine timed in one process), or `in_flight` requests
    at once (throughput)."""
    if in_flight <= 1:
        return engine.timed_call(batch)
    if not isinstance(engine, ServesConcurrently):
        raise TypeError(f"the {backend} engine cannot serve concurrent requests (it has no concurrent_call)")
    return engine.concurrent_call(batch, in_flight)


def main(argv: list[str]) -> None:
    fd, parent = int(argv[0]), int(argv[1])
    end_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the group: the parent ends this child
    _serve(Connection(fd))


if __name__ == "__main__":
    main(sys.argv[1:])
