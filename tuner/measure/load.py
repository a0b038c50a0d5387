"""How busy the machine was with other work while we timed: the CPU time every process used, minus
our own, over the window. A timing on a busy machine is not the engine's speed."""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass

import psutil

BUSY_SHARE = 0.2  # others used more than this share of all cores: the timing is marked busy


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


class LoadMeter:
    """Use as a context manager around a timing window; .load holds the result after it."""

    def __init__(self):
        self.load: Load | None = None

    def __enter__(self) -> "LoadMeter":
        self._t0, self._busy0, self._own0 = time.monotonic(), _busy_seconds(), _own_seconds()
        return self

    def __exit__(self, *exc) -> None:
        self.load = load_since(self._t0, self._busy0, self._own0)


def load_since(t0: float, busy0: float, own0: float) -> Load:
    wall = max(time.monotonic() - t0, 1e-6)
    cores = os.cpu_count() or 1
    other = max(0.0, (_busy_seconds() - busy0) - (_own_seconds() - own0)) / wall
    share = other / cores
    return Load(round(other, 3), round(share, 3), share > BUSY_SHARE)


def sample_load(seconds: float = 1.0) -> Load:
    """The load of other processes over the next `seconds` (this process idle meanwhile)."""
    with LoadMeter() as meter:
        time.sleep(seconds)
    return meter.load


def wait_until_quiet(on_wait, max_wait_s: float = 1800.0, poll_s: float = 5.0) -> Load:
    """--when-busy wait: hold back until other processes leave the cores alone (or max_wait_s passes)."""
    deadline = time.monotonic() + max_wait_s
    load = sample_load()
    while load.busy and time.monotonic() < deadline:
        on_wait(f"waiting for a quiet machine (others use {load.other_cores:.1f} cores)")
        time.sleep(poll_s)
        load = sample_load()
    return load
