"""A workload's figures from its sets' (tuner.inputs.workload): each set of shapes is timed on its own, paired with
the baseline at those shapes, and the workload's figure is the weighted mean over the sets. The ratio is the mean of
the sets' ratios, so a set where the candidate is 2x slower counts as much as its share of the requests says, however
few milliseconds it takes."""
from __future__ import annotations

from collections.abc import Sequence

from .latency import LatencyStats
from .paired import RelativeLatency


def weighted_mean(values: Sequence[float], weights: Sequence[float]) -> float:
    """Σ value x weight / Σ weight."""
    return float(sum(v * w for v, w in zip(values, weights)) / sum(weights))


def weighted_stats(stats: Sequence[LatencyStats], weights: Sequence[float]) -> LatencyStats:
    """The mean latency of a request of the workload: each field the weighted mean of the sets' (counts summed)."""
    if len(stats) == 1:
        return stats[0]
    field = lambda name: weighted_mean([getattr(s, name) for s in stats], weights)  # noqa: E731
    return LatencyStats(field("median_ms"), field("p10_ms"), field("p90_ms"), field("mean_ms"), field("std_ms"),
                        sum(s.count for s in stats), field("ci_low_ms"), field("ci_high_ms"),
                        all(s.converged for s in stats))


def weighted_relative(rels: Sequence[RelativeLatency], weights: Sequence[float]) -> RelativeLatency:
    """The workload's ratio to the baseline: the weighted mean of the sets' ratios. Its interval is the weighted
    mean of theirs, as if their errors went together: wider than independent errors would give, never narrower.
    Converged where every set converged; stopped as the first set that stopped."""
    if len(rels) == 1:
        return rels[0]
    return RelativeLatency(weighted_mean([r.ratio for r in rels], weights),
                           weighted_mean([r.ci_low for r in rels], weights),
                           weighted_mean([r.ci_high for r in rels], weights), min(r.rounds for r in rels),
                           all(r.converged for r in rels), next((r.stopped for r in rels if r.stopped), None))
