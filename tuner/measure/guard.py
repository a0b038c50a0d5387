"""The baseline guards every timing. Paired timing assumes that load moves the candidate and the baseline
alike; with unequal thread counts it does not (a two-thread baseline beside a burner on one core read
3x slow while a one-thread candidate did not, and the candidate was scored 7.3x). So each window's baseline
median is held against the study's history of baseline windows: one far above it was disturbed, and
the candidate is not scored from it. Only above: load slows the baseline and flatters the candidate's
ratio, while a baseline faster than the history is a quieter machine than before. A two-sided band read
every quiet window of a study as disturbed once its first windows had been timed beside a test run (the
band was drawn around them, and a disturbed window never joins the history that could correct it)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

MIN_WINDOWS = 3  # baseline windows before a band is drawn: fewer say nothing about the noise
MIN_BAND = 0.25  # the band is at least +-25% of the history's median (windows of one baseline moved 30% on
# a 2-core machine with one other busy process; the load this guards against moved it 3x)
SPREADS = 4.0  # and at least 4 robust standard deviations (1.4826 MAD) of the history


@dataclass(frozen=True)
class BaselineBand:
    """Where an undisturbed baseline window's median falls, from the study's earlier windows."""

    median_ms: float
    low_ms: float
    high_ms: float
    windows: int

    @classmethod
    def from_history(cls, medians_ms: list[float]) -> BaselineBand | None:
        if len(medians_ms) < MIN_WINDOWS:
            return None
        a = np.asarray(medians_ms, dtype=np.float64)
        mid = float(np.median(a))
        half = max(MIN_BAND * mid, SPREADS * 1.4826 * float(np.median(np.abs(a - mid))))
        return cls(mid, mid - half, mid + half, len(a))

    def holds(self, window_ms: float) -> bool:
        """Not disturbed: at most the band's top (low_ms is shown, never a reason to refuse a window)."""
        return window_ms <= self.high_ms

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict | None) -> BaselineBand | None:
        return cls(**d) if d else None


def guard_record(band: BaselineBand | None, window_ms: float, retimed: int) -> dict | None:
    """What a trial stores of the guard: the band, the window's baseline median, whether it was disturbed
    and how often the window was timed again; None without a band (too few windows yet)."""
    if band is None:
        return None
    return {"band": band.to_dict(), "window_ms": window_ms, "disturbed": not band.holds(window_ms),
            "retimed": retimed}
