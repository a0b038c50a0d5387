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
# What the study stores for workers that join it (`tuner worker`): the study-wide budget and the timing protocol.
MAX_TRIALS_ATTR = "max_trials"
PROTOCOL_ATTR = "protocol"
SETTINGS_ATTR = "tuner_settings"  # search.settings.StudySettings, as stored


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


class _Stored:
    """One of a trial's stored attributes, read through StoredTrial when asked (not copied at .of: the readers
    that rank and count trials ask one or two attributes of hundreds of trials, per finished trial). empty: what
    a missing (or empty) attribute reads as."""

    def __init__(self, key: str, empty: Any = None):
        self.key, self.empty = key, empty

    def __get__(self, rec: StoredTrial | None, owner: type) -> Any:
        if rec is None:
            return self
        value = rec.attrs.get(self.key)
        return value if value is not None or self.empty is None else type(self.empty)()


class StoredTrial:
    """A trial as it was stored, read from its user attrs: the measurement (TrialRecord's fields) and the marks
    the search and the run code set beside it (BASELINE, REUSED_FROM, ...). The one reader of a trial's
    attributes: every other module asks this record (StoredTrial.of(trial)). An attribute the trial lacks reads
    as None, a dict one as {} where a reader treats both alike (config, metrics, machine)."""

    __slots__ = ("attrs",)
    config: dict[str, Any] = _Stored(CONFIG, {})
    latency: dict[str, Any] | None = _Stored("latency")
    metrics: dict[str, float] = _Stored("metrics", {})
    violations: dict[str, float] | None = _Stored("violations")
    relative: dict[str, Any] | None = _Stored("relative")
    baseline_latency: dict[str, Any] | None = _Stored("baseline_latency")
    baseline_guard: dict[str, Any] | None = _Stored("baseline_guard")
    load: dict[str, Any] | None = _Stored("load")
    precision: dict[str, Any] | None = _Stored("precision")
    processes: dict[str, int] | None = _Stored("processes")
    workload: list[dict[str, Any]] | None = _Stored("workload")
    backend: str | None = _Stored("backend")
    build_s: float | None = _Stored("build_s")
    engine_bytes: int | None = _Stored("engine_bytes")
    engine_dir: str | None = _Stored("engine_dir")
    machine: dict[str, Any] = _Stored(MACHINE, {})
    build_key: str | None = _Stored(BUILD_KEY)
    baseline_machine: str | None = _Stored(BASELINE_MACHINE)
    reused_from: int | None = _Stored(REUSED_FROM)
    fail_reason: str | None = _Stored(FAIL_REASON)
    retry_of: int | None = _Stored(RETRY_OF)
    enqueued: str | None = _Stored(ENQUEUED)  # why the trial was queued: "greedy", "<backend> defaults", ...
    worker: str | None = _Stored(WORKER)
    known_failure: dict[str, Any] | None = _Stored(KNOWN_FAILURE)

    def __init__(self, attrs: dict[str, Any]):
        self.attrs = attrs

    @classmethod
    def of(cls, trial) -> StoredTrial:
        """The record of a trial (a FrozenTrial, or anything with user_attrs)."""
        return cls(trial.user_attrs)

    @property
    def baseline(self) -> bool:
        """The runtime's defaults every ratio is read against (trial 0, each other machine's first)."""
        return bool(self.attrs.get(BASELINE))

    @property
    def lock_wait_s(self) -> float:
        return float(self.attrs.get(LOCK_WAIT_S, 0.0))

    @property
    def has_config(self) -> bool:
        """The trial stored its config (the objective does before building)."""
        return CONFIG in self.attrs

    @property
    def measured(self) -> bool:
        return self.latency is not None

    @property
    def median_ms(self) -> float:
        """The absolute median latency; infinite for a trial that measured nothing."""
        return float((self.latency or {}).get("median_ms", float("inf")))

    @property
    def ratio(self) -> float | None:
        """Candidate / baseline timed in the same window (paired timing), or None for a trial timed alone."""
        return float(self.relative["ratio"]) if self.relative else None

    @property
    def stopped(self) -> str | None:
        """Why its timing stopped early ("overrun", "slow run", ...), or None."""
        return (self.relative or {}).get("stopped")

    @property
    def disturbed(self) -> bool:
        return bool((self.baseline_guard or {}).get("disturbed"))

    @property
    def busy(self) -> bool:
        return bool((self.load or {}).get("busy"))

    @property
    def baseline_pid(self) -> int | None:
        """The process that timed the baseline beside it (paired timing)."""
        return (self.processes or {}).get("baseline")

    @property
    def copied(self) -> bool:
        """Its measurement is another trial's (the same build): not a timing of its own."""
        return self.reused_from is not None


@dataclass(frozen=True)
class Finalist:
    """One finalist of a selection as the winner's record keeps it (tuner.winner.select._decide): its side-by-side
    latency, its ratio to the baseline in the same blocks (RelativeLatency.to_dict(); None where it was not timed in
    blocks with one), and what it is."""

    trial: int
    feasible: bool  # passed the accuracy re-check
    median_ms: float
    p10_ms: float
    p90_ms: float
    ci_low_ms: float
    ci_high_ms: float
    relative: dict[str, Any] | None
    baseline: bool
    defaults: str | None  # the runtime whose defaults it is
    choices: int | None  # choices off the space's defaults (simplest_among_ties)

    @classmethod
    def from_stored(cls, d: dict[str, Any]) -> Finalist:
        return cls(trial=d["trial"], feasible=bool(d.get("feasible")), median_ms=d["median_ms"], p10_ms=d["p10_ms"],
                   p90_ms=d["p90_ms"], ci_low_ms=d["ci_low_ms"], ci_high_ms=d["ci_high_ms"], relative=d.get("relative"),
                   baseline=bool(d.get("baseline")), defaults=d.get("defaults"), choices=d.get("choices"))


@dataclass(frozen=True)
class Tie:
    """The finalists that tied the fastest within noise, of which the simplest won (select.simplest_among_ties)."""

    fastest: int
    trials: list[int]


@dataclass(frozen=True)
class RuntimeDefaults:
    """An installed runtime's defaults as selection timed them beside the winner (select.against_defaults)."""

    trial: int | None  # the trial that measured them; None: built at selection only
    feasible: bool
    error: str | None  # why they did not build
    speedup: float | None  # the winner's over them, side by side


@dataclass(frozen=True)
class NotDeployed:
    """A finalist that won side by side but ran slower than the baseline deployed alone: not the winner."""

    trial: int
    claimed_speedup: float | None
    deployed: dict[str, Any]  # the deployment check's figures (execute.timing.deployed_over)


@dataclass(frozen=True)
class Winner:
    """The winner selection confirmed (tuner.winner.select), as stored in the study (WINNER_ATTR), typed for the
    views (report/winner_facts.py renders it); `stored` is the whole record, as export and verify write it on."""

    trial: int
    config: dict[str, Any]
    requirement: str
    confirmed_latency: dict[str, Any]  # LatencyStats.to_dict() of the side-by-side timing
    confirmed_metrics: dict[str, float]
    confirmed_relative: dict[str, Any] | None  # RelativeLatency.to_dict() against the baseline, side by side
    speedup: float | None  # over the baseline, side by side; None without a baseline
    baseline_latency: dict[str, Any] | None
    precision: dict[str, Any] | None  # what the engine computed in, as its runtime said
    confirmed_workload: list[dict[str, Any]] | None  # ShapeFigure dicts, a workload of several sets
    load: dict[str, Any] | None
    deployed: dict[str, Any] | None  # the deployment check: each engine alone in fresh processes
    verify: dict[str, Any] | None  # `tuner verify`'s figures, once it ran
    finalists: list[Finalist]  # each finalist's side-by-side figures (report/finalists.py)
    tie: Tie | None
    tie_ruled: bool  # selected under the simplest-among-ties rule (a winner stored before it has no "tie")
    defaults: dict[str, RuntimeDefaults]  # per installed runtime; {} for a winner selected before they were timed
    not_deployed: list[NotDeployed]
    stored: dict[str, Any]

    @classmethod
    def from_attrs(cls, d: dict[str, Any]) -> Winner:
        return cls(trial=d["trial"], config=d.get("config") or {}, requirement=d.get("requirement") or "",
                   confirmed_latency=d.get("confirmed_latency") or d.get("latency") or {},
                   confirmed_metrics=d.get("confirmed_metrics") or d.get("metrics") or {},
                   confirmed_relative=d.get("confirmed_relative"), speedup=d.get("speedup"),
                   baseline_latency=d.get("baseline_latency"), precision=d.get("precision"),
                   confirmed_workload=d.get("confirmed_workload"), load=d.get("load"), deployed=d.get("deployed"),
                   verify=d.get("verify"), finalists=[Finalist.from_stored(f) for f in d.get("finalists") or []],
                   tie=Tie(**d["tie"]) if d.get("tie") else None, tie_ruled="tie" in d, defaults=_runtime_defaults(d),
                   not_deployed=[NotDeployed(n["trial"], n.get("claimed_speedup"), n["deployed"])
                                 for n in d.get("not_deployed") or []], stored=d)

    @property
    def busy(self) -> bool:
        """Chosen while other processes kept the machine busy."""
        return bool((self.load or {}).get("busy"))


def _runtime_defaults(d: dict[str, Any]) -> dict[str, RuntimeDefaults]:
    """Per runtime, its timed row ("defaults") with the winner's speedup over it ("vs_defaults"), in stored order."""
    vs, rows = d.get("vs_defaults") or {}, d.get("defaults") or {}
    return {name: RuntimeDefaults(row.get("trial"), bool(row.get("feasible", True)), row.get("error"), vs.get(name))
            for name in [*rows, *(n for n in vs if n not in rows)] for row in [rows.get(name) or {}]}


@dataclass(frozen=True)
class StoredStudy:
    """A study's own attributes as engine-tuner stores them, read once (StoredStudy.of(study)): the one reader
    of them, as StoredTrial is of a trial's. The artifact store's record is its own module's
    (tuner.store.artifacts, a layer below)."""

    winner: Winner | None
    selected: bool  # selection ran: a winner, or None stored where nothing was feasible
    best_effort: dict[str, Any] | None  # the closest candidate where nothing was feasible
    settings: dict[str, Any] | None  # StudySettings as stored (search.settings reads it)
    max_trials: int | None
    protocol: dict[str, Any] | None  # LatencyProtocol as a dict, for workers that join
    has_budget: bool  # MAX_TRIALS_ATTR was stored (None where the run had no study-wide budget)
    has_protocol: bool
    attrs: dict[str, Any]  # all of them: the marks (marked) and the learnt failures (search.failures)

    @classmethod
    def of(cls, study) -> StoredStudy:
        """The attributes of a study (an optuna.Study), or a dict of them read already."""
        a = study if isinstance(study, dict) else study.user_attrs
        w = a.get(WINNER_ATTR)
        return cls(winner=Winner.from_attrs(w) if w else None, selected=WINNER_ATTR in a,
                   best_effort=a.get(BEST_EFFORT_ATTR), settings=a.get(SETTINGS_ATTR), max_trials=a.get(MAX_TRIALS_ATTR),
                   protocol=a.get(PROTOCOL_ATTR), has_budget=MAX_TRIALS_ATTR in a, has_protocol=PROTOCOL_ATTR in a,
                   attrs=a)

    def marked(self, key: str) -> bool:
        """A once-per-study step done (search.enqueue's "baseline_enqueued", "greedy_enqueued/<table>", ...)."""
        return bool(self.attrs.get(key))


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
