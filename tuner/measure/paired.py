"""Timing engines side by side: several engines timed in turn, in short blocks, in one process, so
that load which comes and goes moves them alike. Trials time each candidate against the baseline
(paired timing); selection and verify time the finalists with the baseline the same way.

Blocks, not single runs: an ONNX Runtime session that just ran keeps its threads spinning for a
while, and the next session's first runs read 30-40% slow. Each block therefore starts with an
untimed lead-in (at least one run and LEAD_IN_S), and the order of the engines turns each round so
none always runs first. Engines are compared by the ratio of their medians, with a 95% interval
from resampling whole rounds (a round holds one block of every engine, taken close in time).
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from .latency import LatencyProtocol, LatencyStats, sample_ms, summarize

BLOCK_S = 0.1  # target length of one block of timed runs
LEAD_IN_S = 0.02  # untimed runs before each block, at least this long
MIN_ROUNDS = 6  # rounds before a ratio may be called converged

Call = Callable[[], object]
Clock = Callable[[], float]  # seconds, monotonic: time.perf_counter, or a test's fake clock
Rounds = list[list[float]]  # one list of samples (ms) per round


@dataclass
class RelativeLatency:
    """An engine's latency over the baseline's: the ratio of medians, with its 95% interval."""

    ratio: float
    ci_low: float
    ci_high: float
    rounds: int
    converged: bool

    def to_dict(self) -> dict:
        return asdict(self)


def _lead_in(call: Call, clock: Clock) -> None:
    end = clock() + LEAD_IN_S
    call()
    while clock() < end:
        call()


def _block(call: Call, runs: int, clock: Clock) -> list[float]:
    _lead_in(call, clock)
    return [sample_ms(call, clock) for _ in range(runs)]


def _runs_per_block(calls: list[Call], warmup: int, clock: Clock) -> int:
    """Enough runs of the slowest engine to fill BLOCK_S, between 3 and 20."""
    slowest = 0.0
    for call in calls:
        t0 = clock()
        for _ in range(max(1, warmup)):
            call()
        slowest = max(slowest, (clock() - t0) / max(1, warmup))
    return int(min(20, max(3, math.ceil(BLOCK_S / max(slowest, 1e-6)))))


def ratio_interval(rounds: Rounds, base_rounds: Rounds, resamples: int = 300) -> tuple[float, float, float]:
    """(median / baseline median, 2.5% and 97.5% bootstrap quantiles over whole rounds)."""
    a, b = np.asarray(rounds), np.asarray(base_rounds)
    ratio = float(np.median(a) / np.median(b))
    rng = np.random.default_rng(0)  # the same samples give the same interval
    picks = rng.integers(0, len(a), size=(resamples, len(a)))
    boot = np.median(a[picks].reshape(resamples, -1), axis=1) / np.median(b[picks].reshape(resamples, -1), axis=1)
    lo, hi = np.quantile(boot, [0.025, 0.975])
    return ratio, float(lo), float(hi)


def _tight(ratio: float, lo: float, hi: float, rel: float) -> bool:
    return hi - ratio <= rel * ratio and ratio - lo <= rel * ratio


def time_blocks(calls: list[Call], protocol: LatencyProtocol, baseline: int = -1,
                max_rounds: int | None = None, clock: Clock = time.perf_counter) -> tuple[list[Rounds], bool]:
    """Samples per engine and round. Stops once every engine's ratio to calls[baseline] has its 95%
    interval within +-rel_ci (after MIN_ROUNDS), or at the protocol's time cap (all engines together),
    its run cap (per engine) or max_rounds. Returns (samples, converged). clock: what every run and
    cap is timed with (a test passes a fake one that its fake engines advance)."""
    runs = _runs_per_block(calls, protocol.warmup, clock)
    samples: list[Rounds] = [[] for _ in calls]
    order = list(range(len(calls)))
    start = clock()
    rounds = 0
    while rounds * runs < protocol.max_runs and (max_rounds is None or rounds < max_rounds):
        for i in order if rounds % 2 == 0 else order[::-1]:
            samples[i].append(_block(calls[i], runs, clock))
        rounds += 1
        if rounds >= MIN_ROUNDS and all(_tight(*ratio_interval(s, samples[baseline]), protocol.rel_ci)
                                        for i, s in enumerate(samples) if i != baseline % len(calls)):
            return samples, True
        if clock() - start > protocol.max_seconds and rounds >= 3:
            break
    return samples, False


def relative_to(samples: list[Rounds], baseline: int, converged: bool) -> list[tuple[LatencyStats, RelativeLatency]]:
    """Per engine: its latency statistics and its ratio to the baseline engine."""
    out = []
    for s in samples:
        ratio, lo, hi = ratio_interval(s, samples[baseline])
        out.append((summarize([x for r in s for x in r], converged), RelativeLatency(ratio, lo, hi, len(s), converged)))
    return out


def measure_paired(candidate: Call, baseline: Call, protocol: LatencyProtocol | None = None,
                   clock: Clock = time.perf_counter) -> tuple[LatencyStats, LatencyStats, RelativeLatency]:
    """A candidate timed against the baseline until the ratio is known to +-rel_ci (or a cap is hit)."""
    samples, converged = time_blocks([candidate, baseline], protocol or LatencyProtocol(), baseline=1, clock=clock)
    (cand, rel), (base, _) = relative_to(samples, 1, converged)
    return cand, base, rel
