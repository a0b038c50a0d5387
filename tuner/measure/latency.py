"""The latency protocol: warm up, then time until the median's 95% CI is within +-2%, or a cap is hit."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

MAX_SPREAD = 2.0  # p90 over p10 above this: the runs differ too much for one median to describe them


@dataclass
class LatencyProtocol:
    warmup: int = 5
    min_runs: int = 10
    max_runs: int = 500
    max_seconds: float = 10.0
    rel_ci: float = 0.02  # half-width of the median's 95% CI, relative to the median


@dataclass
class LatencyStats:
    median_ms: float
    p10_ms: float
    p90_ms: float
    mean_ms: float
    std_ms: float
    count: int
    ci_low_ms: float
    ci_high_ms: float
    converged: bool

    def to_dict(self) -> dict:
        return asdict(self)


def median_ci(samples: np.ndarray, z: float = 1.96) -> tuple[float, float]:
    """Distribution-free 95% CI of the median from order statistics (binomial normal approximation)."""
    s = np.sort(samples)
    n = len(s)
    half = z * np.sqrt(n) / 2
    lo = int(max(0, np.floor(n / 2 - half)))
    hi = int(min(n - 1, np.ceil(n / 2 + half)))
    return float(s[lo]), float(s[hi])


def steady(p10_ms: float, p90_ms: float) -> bool:
    """The runs agree well enough for a median to stand for them (p90 within MAX_SPREAD x p10)."""
    return p10_ms > 0 and p90_ms <= MAX_SPREAD * p10_ms


def ci_overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Two 95% intervals (low, high), of medians or of ratios, that overlap (touching counts): they tie within noise."""
    return a[0] <= b[1] and b[0] <= a[1]


def summarize(samples_ms: list[float] | np.ndarray, converged: bool) -> LatencyStats:
    """The statistics of the samples; converged only if the caller says so and the runs are steady."""
    a = np.asarray(samples_ms, dtype=np.float64)
    lo, hi = median_ci(a)
    p10, p90 = float(np.percentile(a, 10)), float(np.percentile(a, 90))
    return LatencyStats(
        median_ms=float(np.median(a)),
        p10_ms=p10,
        p90_ms=p90,
        mean_ms=float(np.mean(a)),
        std_ms=float(np.std(a)),
        count=int(len(a)),
        ci_low_ms=lo,
        ci_high_ms=hi,
        converged=converged and steady(p10, p90),
    )


def is_converged(samples_ms: list[float], protocol: LatencyProtocol) -> bool:
    """The median's CI is tight and the runs are steady: a tight median of runs that differ 5x
    (19 ms against 96 ms) describes none of them, so timing goes on to the cap."""
    if len(samples_ms) < protocol.min_runs:
        return False
    a = np.asarray(samples_ms)
    med = float(np.median(a))
    lo, hi = median_ci(a)
    return (med > 0 and (hi - med) <= protocol.rel_ci * med and (med - lo) <= protocol.rel_ci * med
            and steady(float(np.percentile(a, 10)), float(np.percentile(a, 90))))


def sample_ms(call: Callable[[], object], clock: Callable[[], float] = time.perf_counter) -> float:
    """One synchronised call's time: the one it reports itself when it returns a float (a GPU engine's
    CUDA-event time around its enqueue, as trtexec reports), else `clock` (seconds) around it."""
    t0 = clock()
    own = call()
    wall = (clock() - t0) * 1e3
    return own if isinstance(own, float) else wall


def measure_latency(run: Callable[[], object], protocol: LatencyProtocol | None = None,
                    clock: Callable[[], float] = time.perf_counter) -> LatencyStats:
    """Time `run()` (one inference on a fixed batch). Session creation happens before, untimed."""
    protocol = protocol or LatencyProtocol()
    for _ in range(protocol.warmup):
        run()
    samples: list[float] = []
    start = clock()
    converged = False
    while len(samples) < protocol.max_runs:
        samples.append(sample_ms(run, clock))
        if is_converged(samples, protocol):
            converged = True
            break
        if clock() - start > protocol.max_seconds and len(samples) >= 3:
            break
    return summarize(samples, converged)

