"""What the jobs of an isolated child hand back to the parent (tuner.execute.jobs), and what the Evaluator makes of
them after timing: one typed record per job, pickled across the process boundary. The stored forms (the analysis
cache, a winner's record, report.json) are written from these by their owners."""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from ..measure.latency import LatencyStats
from ..measure.paired import RelativeLatency

Saved = tuple[str, str]  # an engine on disk, as its timing process takes it: (backend name, folder)


@dataclass(frozen=True)
class QuickCheck:
    """One build of the analysis (accuracy_job): its error metrics and, where it was timed, a quick latency; timed
    against a baseline build too, its ratio to that one in the same window and the baseline's own latency."""

    metrics: dict[str, float]
    feasible: bool
    median_ms: float | None = None
    baseline_ms: float | None = None
    ratio: float | None = None
    ratio_ci: tuple[float, float] | None = None

    def to_json(self) -> dict:
        """The analysis cache's form (JSON: the interval as a list)."""
        out = asdict(self)
        out["ratio_ci"] = list(self.ratio_ci) if self.ratio_ci is not None else None
        return out

    @classmethod
    def from_json(cls, stored: dict) -> QuickCheck:
        ci = stored.get("ratio_ci")
        return cls(metrics=stored["metrics"], feasible=bool(stored.get("feasible")), median_ms=stored.get("median_ms"),
                   baseline_ms=stored.get("baseline_ms"), ratio=stored.get("ratio"),
                   ratio_ci=tuple(ci) if ci is not None else None)

    def judged(self, feasible: bool) -> QuickCheck:
        """The same build under another requirement (the cache holds every metric; each study judges its own)."""
        return replace(self, feasible=feasible)


@dataclass(frozen=True)
class Rebuilt:
    """A finalist of selection rebuilt and checked again in the child (confirm_job), saved for its timing process:
    `saved` is the main file's name in its folder."""

    metrics: dict[str, float]
    feasible: bool
    precision: str | None
    backend: str
    device: str
    saved: str


@dataclass(frozen=True)
class Confirmed:
    """A finalist after the side-by-side timing (Evaluator.confirm): its rebuild, or why it did not build (`error`,
    then nothing else is set), and its figures against the reference finalist."""

    rebuilt: Rebuilt | None = None
    error: str | None = None
    latency: LatencyStats | None = None
    relative: RelativeLatency | None = None
    process: int | None = None
    workload: list[dict] | None = None  # per set of the workload's shapes (search.record.ShapeFigure); None: one set

    @property
    def built(self) -> bool:
        return self.rebuilt is not None

    @property
    def feasible(self) -> bool:
        return self.rebuilt is not None and bool(self.rebuilt.feasible)


@dataclass(frozen=True)
class Confirmation:
    """Every finalist of one selection, in the order given, and the machine's load while they were timed."""

    finalists: list[Confirmed]
    load: dict


@dataclass(frozen=True)
class SavedEngine:
    """An engine built and saved (export_job), or loaded from an artifact (load_job), and checked: its metrics, per
    output too, the main file, the backend's lines to run it, and what it computes in as its runtime says."""

    metrics: dict[str, float]
    per_output: dict
    engine: str
    backend: str
    usage: str
    precision: str | None


@dataclass(frozen=True)
class VerifyBuilds:
    """What verify_job made ready for timing: the winner and the backend's defaults on disk, and the winner's check."""

    winner: Saved
    defaults: Saved
    device: str
    metrics: dict[str, float]
    feasible: bool


@dataclass(frozen=True)
class Verified:
    """Evaluator.verify's figures: the winner and the defaults in paired blocks, each in a fresh process, and (where
    asked) each deployed alone in several fresh processes."""

    latency: LatencyStats
    baseline_latency: LatencyStats
    relative: RelativeLatency
    metrics: dict[str, float]
    feasible: bool
    load: dict
    processes: dict[str, int]
    workload: list[dict] | None = None
    alone: dict | None = None  # timing.deployed_over's figures
