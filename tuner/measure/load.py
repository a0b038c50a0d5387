"""How busy the machine was with other work while we timed: the CPU time every process used, minus
our own, over the window. A timing on a busy machine is not the engine's speed."""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import psutil

BUSY_SHARE = 0.2  # others used more than this share of all cores: the timing is marked busy
MIN_WINDOW_S = 0.2  # shorter windows say nothing about the load (CPU-time counters tick in 10 ms)


@dataclass
class Load:
    other_cores: float  # cores' worth of CPU used by other processes, on average, during the window
    share: float  # other_cores / all cores
    busy: bool

    def to_dict(self) -> dict:
        return asdict(self)


def _busy_seconds() -> float:
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def _own_seconds() -> float:
    t = psutil.Process().cpu_times()
    return t.user + t.system


@dataclass(frozen=True)
class CpuCounters:
    """Where the load is read from: the machine's CPU seconds in use, this process's own, a monotonic
    clock and the core count. A test passes its own functions and reads an exact load."""

    busy: Callable[[], float] = _busy_seconds
    own: Callable[[], float] = _own_seconds
    clock: Callable[[], float] = time.monotonic
    cores: int = os.cpu_count() or 1

    def snapshot(self) -> tuple[float, float, float]:
        return self.clock(), self.busy(), self.own()

    def load_since(self, start: tuple[float, float, float]) -> Load:
        t0, busy0, own0 = start
        wall = self.clock() - t0
        if wall < MIN_WINDOW_S:  # the counters tick in 10 ms: a shorter window reads noise (5.8 "cores" once)
            return Load(0.0, 0.0, False)
        other = max(0.0, (self.busy() - busy0) - (self.own() - own0)) / wall
        share = other / self.cores
        return Load(round(other, 3), round(share, 3), share > BUSY_SHARE)


MACHINE = CpuCounters()


def with_processes(pids: list[int], counters: CpuCounters = MACHINE) -> CpuCounters:
    """`counters` whose own CPU seconds include those of the processes `pids` (the engines timed in processes
    of their own: their work is the timing's, not other load). A process that has ended counts nothing."""
    def own() -> float:
        total = counters.own()
        for pid in pids:
            try:
                t = psutil.Process(pid).cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system
        return total

    return replace(counters, own=own)


class LoadMeter:
    """Use as a context manager around a timing window; .load holds the result after it."""

    def __init__(self, counters: CpuCounters = MACHINE):
        self.counters = counters
        self.load: Load | None = None

    def __enter__(self) -> LoadMeter:
        self._start = self.counters.snapshot()
        return self

    def __exit__(self, *exc) -> None:
        self.load = self.counters.load_since(self._start)


def sample_load(seconds: float = 1.0, counters: CpuCounters = MACHINE,
                sleep: Callable[[float], None] = time.sleep) -> Load:
    """The load of other processes over the next `seconds` (this process idle meanwhile)."""
    with LoadMeter(counters) as meter:
        sleep(seconds)
    return meter.load


def wait_until_quiet(on_wait: Callable[[str], None], max_wait_s: float = 1800.0, poll_s: float = 5.0,
                     counters: CpuCounters = MACHINE, sleep: Callable[[float], None] = time.sleep) -> Load:
    """--when-busy wait: hold back until other processes leave the cores alone (or max_wait_s passes)."""
    deadline = counters.clock() + max_wait_s
    load = sample_load(counters=counters, sleep=sleep)
    while load.busy and counters.clock() < deadline:
        on_wait(f"waiting for a quiet machine (others use {load.other_cores:.1f} cores)")
        sleep(poll_s)
        load = sample_load(counters=counters, sleep=sleep)
    return load
