"""Timing engines side by side: several engines timed in turn, in short blocks, so that load which comes
and goes moves them alike. Trials time each candidate against the baseline (paired timing); selection and
verify time the finalists with the baseline the same way. Each engine is a Timed: one in a process of its
own (tuner.execute.engine_process: what trials, selection and verify time) or a call in this process
(InProcess: the analysis's quick timings, and tests on a fake clock).

Blocks, not single runs: an ONNX Runtime session that just ran keeps its threads spinning for a
while, and the next session's first runs read 30-40% slow. Each block therefore starts with an
untimed lead-in (at least one run and LEAD_IN_S), and the order of the engines turns each round so
none always runs first. Engines are compared by the ratio of their medians, with a 95% interval
from resampling whole rounds (a round holds one block of every engine, taken close in time).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Protocol

import numpy as np

from .latency import LatencyProtocol, LatencyStats, is_converged, sample_ms, summarize

BLOCK_S = 0.1  # target length of one block of timed runs
LEAD_IN_S = 0.02  # untimed runs before each block, at least this long
MIN_ROUNDS = 6  # rounds before a ratio may be called converged
HOPELESS_ROUNDS = 3  # rounds before a candidate may be called hopeless (its ratio's interval is above the limit)
SLOW_RUN = 3.0  # one candidate run slower than this x give_up_above x the baseline's run ends the timing at once
OVERRUN = 3.0  # no timing outlives this x the protocol's time cap, whatever its rounds

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
    stopped: str | None = None  # why timing stopped before converging: "hopeless", "slow run", "overrun"

    def to_dict(self) -> dict:
        return asdict(self)


def _lead_in(call: Call, clock: Clock) -> None:
    end = clock() + LEAD_IN_S
    call()
    while clock() < end:
        call()


def run_block(call: Call, runs: int, clock: Clock = time.perf_counter) -> list[float]:
    """One block of an engine: an untimed lead-in (at least one run and LEAD_IN_S), then `runs` timed runs' ms."""
    _lead_in(call, clock)
    return [sample_ms(call, clock) for _ in range(runs)]


class Timed(Protocol):
    """An engine as the blocks see it, wherever it runs."""

    def warm_run(self) -> float:
        """One run: its seconds (the warm-up's estimate of what a run costs)."""

    def block(self, runs: int) -> list[float]:
        """run_block on the engine: the ms of its `runs` timed runs."""


class InProcess:
    """A call timed in this process, on `clock`."""

    def __init__(self, call: Call, clock: Clock = time.perf_counter):
        self.call, self.clock = call, clock

    def warm_run(self) -> float:
        t0 = self.clock()
        self.call()
        return self.clock() - t0

    def block(self, runs: int) -> list[float]:
        return run_block(self.call, runs, self.clock)


def timed(engine: Call | Timed, clock: Clock = time.perf_counter) -> Timed:
    """A Timed as given, or a plain call wrapped to run in this process."""
    return engine if hasattr(engine, "block") else InProcess(engine, clock)


def _warm_up(calls: list[Timed], warmup: int, baseline: int, give_up_above: float | None) -> tuple[list[float], bool]:
    """Each engine's seconds per run over its warm-up, the baseline's first. With give_up_above, a
    candidate's warm run (its second on: a first run may pay for lazy set-up) slower than SLOW_RUN x
    give_up_above x the baseline's ends the warm-up at once: returns (seconds per run, whether a
    candidate was that slow)."""
    per_run = [0.0] * len(calls)
    for i in [baseline] + [i for i in range(len(calls)) if i != baseline]:
        times = []
        for _ in range(max(1, warmup)):
            times.append(calls[i].warm_run())
            if (i != baseline and give_up_above and len(times) > 1
                    and times[-1] > SLOW_RUN * give_up_above * per_run[baseline]):
                per_run[i] = times[-1]
                return per_run, True
        per_run[i] = sum(times) / len(times)
    return per_run, False


def _runs_per_block(per_run_s: list[float]) -> int:
    """Enough runs of the slowest engine to fill BLOCK_S, between 3 and 20."""
    return int(min(20, max(3, math.ceil(BLOCK_S / max(max(per_run_s), 1e-6)))))


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


def time_blocks(engines: list[Call | Timed], protocol: LatencyProtocol, baseline: int = -1, max_rounds: int | None = None,
                clock: Clock = time.perf_counter,
                give_up_above: float | None = None) -> tuple[list[Rounds], bool, str | None]:
    """Samples per engine and round. Stops once every engine's ratio to calls[baseline] has its 95%
    interval within +-rel_ci (after MIN_ROUNDS), or at the protocol's time cap (all engines together,
    after 3 rounds; at OVERRUN x the cap whatever the rounds), its run cap (per engine) or max_rounds.
    give_up_above: a ratio no candidate that could still win reaches (1.5 x the best so far); timing
    stops once every candidate's interval lies above it, or at once when a candidate's single run is far
    slower than it. Returns (samples, converged, why it stopped early or None). clock: what every run and
    cap is timed with (a test passes a fake one that its fake engines advance)."""
    calls = [timed(e, clock) for e in engines]
    baseline %= len(calls)
    start = clock()
    per_run_s, too_slow = _warm_up(calls, protocol.warmup, baseline, give_up_above)
    if too_slow:  # one run each is all there is to say: the ratio from the warm-up (stopped_at)
        return [[[s * 1e3]] for s in per_run_s], False, "slow run"
    runs = _runs_per_block(per_run_s)
    samples: list[Rounds] = [[] for _ in calls]
    order = list(range(len(calls)))
    candidates = [i for i in order if i != baseline]
    rounds = 0
    while rounds * runs < protocol.max_runs and (max_rounds is None or rounds < max_rounds):
        for i in order if rounds % 2 == 0 else order[::-1]:
            samples[i].append(calls[i].block(runs))
            if clock() - start > OVERRUN * protocol.max_seconds and all(samples[j] for j in order):
                whole = min(len(s) for s in samples)  # a round cut short pairs with nothing: its blocks are dropped
                return [s[:whole] for s in samples], False, "overrun"
        rounds += 1
        intervals = [ratio_interval(samples[i], samples[baseline]) for i in candidates]
        if rounds >= MIN_ROUNDS and all(_tight(*iv, protocol.rel_ci) for iv in intervals):
            return samples, True, None
        if give_up_above is not None and rounds >= HOPELESS_ROUNDS and all(lo > give_up_above for _, lo, _ in intervals):
            return samples, False, "hopeless"
        if clock() - start > protocol.max_seconds and rounds >= 3:
            break
    return samples, False, None


def relative_to(samples: list[Rounds], baseline: int, converged: bool,
                stopped: str | None = None) -> list[tuple[LatencyStats, RelativeLatency]]:
    """Per engine: its latency statistics and its ratio to the baseline engine."""
    out = []
    for s in samples:
        ratio, lo, hi = ratio_interval(s, samples[baseline])
        out.append((summarize([x for r in s for x in r], converged),
                    RelativeLatency(ratio, lo, hi, len(s), converged, stopped)))
    return out


def stopped_at(candidate_ms: float, baseline_ms: float, why: str) -> tuple[LatencyStats, LatencyStats, RelativeLatency]:
    """measure_paired's answer from one run each, for a candidate stopped before its timing (`why`)."""
    (cand, rel), (base, _) = relative_to([[[candidate_ms]], [[baseline_ms]]], 1, False, why)
    return cand, base, rel


def measure_paired(candidate: Call | Timed, baseline: Call | Timed, protocol: LatencyProtocol | None = None,
                   clock: Clock = time.perf_counter,
                   give_up_above: float | None = None) -> tuple[LatencyStats, LatencyStats, RelativeLatency]:
    """A candidate timed against the baseline until the ratio is known to +-rel_ci, a cap is hit, or it
    is known to be slower than give_up_above (rel.stopped says so; its interval is then the bound)."""
    samples, converged, stopped = time_blocks([candidate, baseline], protocol or LatencyProtocol(), baseline=1,
                                              clock=clock, give_up_above=give_up_above)
    (cand, rel), (base, _) = relative_to(samples, 1, converged, stopped)
    return cand, base, rel


def measure_alone(engine: Call | Timed, protocol: LatencyProtocol | None = None,
                  clock: Clock = time.perf_counter) -> LatencyStats:
    """One engine timed by itself, in blocks as paired timing times it: a warm-up, then blocks until its
    median's interval is within +-rel_ci and its runs are steady (latency.is_converged), or a cap."""
    protocol = protocol or LatencyProtocol()
    e = timed(engine, clock)
    per_run = [e.warm_run() for _ in range(max(1, protocol.warmup))]
    runs = _runs_per_block([sum(per_run) / len(per_run)])
    samples: list[float] = []
    start = clock()
    while len(samples) < protocol.max_runs:
        samples += e.block(runs)
        if is_converged(samples, protocol):
            return summarize(samples, True)
        if clock() - start > protocol.max_seconds:
            break
    return summarize(samples, False)
