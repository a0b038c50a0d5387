"""The one trial record: what measuring a candidate gives, and how it is stored in an Optuna trial's
user attrs (to_attrs / from_trial). The attribute names are the stored format: studies made by
earlier versions read back the same way."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, get_type_hints

from ..measure.latency import LatencyStats
from ..measure.load import Load
from ..measure.paired import RelativeLatency
from .failures import KNOWN_FAILURE
from .shapes import conforms, describe

# What a trial records beside its measurement (set by the search and the run code).
CONFIG = "config"
BUILD_KEY = "build_key"
MACHINE = "machine"
BASELINE = "baseline"  # the backend's defaults: trial 0 (and each other machine's first trial)
BASELINE_MACHINE = "baseline_machine"
REUSED_FROM = "reused_from"  # the trial whose measurement of the same build this one copies
FAIL_REASON = "fail_reason"
RETRY_OF = "retry_of"
ENQUEUED = "enqueued"
WORKER = "worker"
LOCK_WAIT_S = "lock_wait_s"  # seconds the trial waited for another study's timing
# What selection stores in the study: the confirmed winner, or the closest candidate where none is feasible.
WINNER_ATTR = "winner"
BEST_EFFORT_ATTR = "best_effort"


@dataclass
class ShapeFigure:
    """One set of a workload's shapes in a trial's record (TrialRecord.workload): the candidate's median there, the
    baseline's in the same window and the ratio with its interval (paired), and the metrics at those shapes."""

    shapes: str  # as --shape writes them: input_ids=1x16,attention_mask=1x16
    weight: float  # its share of the requests (the workload's weights sum to 1)
    median_ms: float
    baseline_ms: float | None = None
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class TrialRecord:
    """One candidate built and measured."""

    config: dict[str, Any]
    latency: dict[str, Any]  # LatencyStats.to_dict(): median_ms, p10_ms, p90_ms, ci_low_ms, ...
    metrics: dict[str, float]  # every error metric, aggregate = worst output
    per_output: dict[str, dict[str, float]]
    violations: dict[str, float]  # per requirement bound: value - limit (feasible when all <= 0)
    feasible: bool
    build_s: float
    engine_bytes: int
    backend: str  # e.g. onnxruntime-1.32.0
    engine_dir: str | None = None  # where the engine was kept (--keep-engines), else None
    timing_window: list[float] | None = None  # wall clock [start, end] of the timing; none when copied
    timing: str | None = None  # "paired" (timed alternately with the baseline) or "alone"; None: before pairing
    relative: dict[str, Any] | None = None  # paired: RelativeLatency.to_dict(), candidate / baseline
    baseline_latency: dict[str, Any] | None = None  # paired: the baseline's LatencyStats in the same window
    load: dict[str, Any] | None = None  # Load.to_dict(): other processes' CPU during the timing window
    baseline_guard: dict[str, Any] | None = None  # measure.guard.guard_record: the baseline window against its band
    # what the engine computes in, as its runtime reports it (tuner.backends.base.engine_precision):
    # {"inference": "bf16", "source": ..., "quantized_nodes": 23, "float_nodes": 1, "quantized": ["int8"]}
    precision: dict[str, Any] | None = None
    # the process ids that timed it, each engine alone in a process of its own (tuner.execute.timing):
    # {"candidate": pid, "baseline": pid}
    processes: dict[str, int] | None = None
    # a workload of several sets of shapes: each set's figures (ShapeFigure as a dict); latency, relative and
    # metrics above are then the workload's (weighted means; each metric's worst set)
    workload: list[dict[str, Any]] | None = None

    @property
    def shape_figures(self) -> list[ShapeFigure]:
        """Each set's figures; [] for a study of one set of shapes."""
        return [ShapeFigure(**f) for f in self.workload or []]

    @property
    def disturbed(self) -> bool:
        """The baseline's window fell outside the study's band: the pair's ratio is not the candidate's."""
        return bool((self.baseline_guard or {}).get("disturbed"))

    @property
    def median_ms(self) -> float:
        return float(self.latency["median_ms"])

    @property
    def relative_latency(self) -> float | None:
        """Candidate / baseline from paired timing; None for a candidate timed alone."""
        return float(self.relative["ratio"]) if self.relative else None

    def to_attrs(self) -> dict[str, Any]:
        """The user attrs of the trial (config excepted: the objective stores it before building)."""
        return {k: v for k, v in asdict(self).items() if k != CONFIG and v is not None}

    def copied(self) -> TrialRecord:
        """The record of another trial with the same build: its measurement, not its timing window."""
        return replace(self, engine_dir=None, timing_window=None)

    @classmethod
    def from_trial(cls, trial) -> TrialRecord | None:
        """The record stored in a trial (a FrozenTrial), or None for a trial that measured nothing."""
        attrs = trial.user_attrs
        if "latency" not in attrs or "metrics" not in attrs:
            return None
        names = {f.name for f in fields(cls)}
        known = {k: attrs[k] for k in names if k in attrs}
        known.setdefault("config", {})
        for k, default in (("per_output", {}), ("violations", {}), ("feasible", False), ("build_s", 0.0),
                           ("engine_bytes", 0), ("backend", "")):
            known.setdefault(k, default)
        return cls(**known)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrialRecord:
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# The stored type of each trial attribute the readers use: TrialRecord's fields (its plain-dict fields by the
# record they hold), then what the search and the run code record beside them. A trial whose attribute has
# another type is left out of reading commands with a note (search.reading).
STORED_TYPES: dict[str, Any] = get_type_hints(TrialRecord) | {
    "latency": LatencyStats, "baseline_latency": LatencyStats | None, "relative": RelativeLatency | None,
    "load": Load | None, "workload": list[ShapeFigure] | None, MACHINE: dict, BUILD_KEY: str, BASELINE: bool,
    BASELINE_MACHINE: str,
    REUSED_FROM: int, FAIL_REASON: str, RETRY_OF: int, ENQUEUED: str, WORKER: str, LOCK_WAIT_S: float,
    KNOWN_FAILURE: dict,
}


# The same for the study's own attributes that the reading commands use.
STUDY_STORED_TYPES: dict[str, Any] = {WINNER_ATTR: dict | None, BEST_EFFORT_ATTR: dict | None}


def stored_fault(attrs: dict[str, Any], types: dict[str, Any] = STORED_TYPES) -> tuple[str, str] | None:
    """What is wrong with stored attributes (a trial's; with STUDY_STORED_TYPES, the study's): the first
    attribute of another type than engine-tuner writes and the fault in words; or None."""
    for key, hint in types.items():
        if key in attrs and not conforms(attrs[key], hint):
            value = attrs[key]
            shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
            return key, f"attribute {key!r} is {type(value).__name__} {shown}; expected {describe(hint)}"
    return None
