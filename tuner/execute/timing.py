"""Timing, done by the parent: each engine a trial, selection or verify times runs in a process of its own
(tuner.execute.engine_process) and the parent drives their blocks (tuner.measure.paired) under the
device's timing lock. The baseline's process serves several trials and is replaced every BASELINE_TRIALS
of them and after a window above its band, so a study times its baseline in several processes: ONNX
Runtime's defaults have a per-process mode on a 2-core machine (1 of 10 fresh processes ran at 24.5 ms
against 18 ms in the rest), which one process cannot show.

The deployment check (time_alone) times engines as a user runs them: each alone in several short fresh
processes, in turn, and compares the medians of the processes' medians."""
from __future__ import annotations

import functools
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from ..backends.base import Batch
from ..errors import JobPhase
from ..measure.guard import BaselineBand, guard_record
from ..measure.latency import LatencyProtocol, LatencyStats
from ..measure.load import Load, LoadMeter, wait_until_quiet, with_processes
from ..measure.paired import SLOW_RUN, RelativeLatency, measure_alone, measure_paired, relative_to, stopped_at, time_blocks
from ..measure.workload import weighted_mean, weighted_relative, weighted_stats
from ..problem.spec import Problem
from ..search.record import ShapeFigure, TrialRecord
from ..store.locks import timing_lock
from .engine_process import EngineProcess
from .evaluate import Built, Phase, build_checked, no_phase

RETIMES = 2  # --when-busy wait: a disturbed baseline window is timed again at most this often
# --when-busy warn: a window above the band is timed once more at once, with a fresh baseline process. On
# MiniLM (AVX-512 Zen 4) the NNCF engine an expert builds had its only window read the baseline 26% above the
# band: marked disturbed, it never became a finalist, and the study's winner was 0.88x of it.
RETIMES_WARN = 1
BASELINE_TRIALS = 8  # one baseline process times at most this many trials

Start = Callable[..., EngineProcess]  # how an engine's process is started (a test passes its own)


class BaselineProcess:
    """The baseline engine (saved in engine_dir) in a process of its own, kept across trials: get() starts
    one where there is none or the last has timed `trials` trials; retire() ends it, so the next get()
    starts a fresh one. started counts the processes so far."""

    def __init__(self, backend: str, engine_dir: str, batch: Batch, trials: int = BASELINE_TRIALS,
                 start: Start = EngineProcess):
        self.backend, self.engine_dir, self.batch = backend, engine_dir, batch
        self.trials, self._start = trials, start
        self._proc: EngineProcess | None = None
        self._served = 0
        self.started = 0

    def get(self) -> EngineProcess:
        if self._proc is not None and self._served >= self.trials:
            self.retire()
        if self._proc is None:
            self._proc = self._start(self.backend, self.engine_dir, self.batch, label="baseline")
            self._served, self.started = 0, self.started + 1
        self._served += 1
        return self._proc

    def one_run_ms(self) -> float:
        """One warm run of the baseline, in ms (the slow-run limit of a trial's accuracy check)."""
        proc = self.get()
        self._served -= 1  # asking is not timing a trial
        if self._served == 0:
            proc.warm_run()  # a first run may pay for lazy set-up
        return proc.warm_run() * 1e3

    def retire(self) -> None:
        if self._proc is not None:
            self._proc.close()
            self._proc = None

    close = retire


@dataclass
class TrialTiming:
    """What the parent's timing of one trial gives its record."""

    latency: LatencyStats
    baseline: LatencyStats | None
    relative: object | None  # RelativeLatency
    load: Load
    window: tuple[float, float] | None
    retimed: int
    processes: dict[str, int]


def time_trial(candidate: EngineProcess, baseline: BaselineProcess | None, device: str,
               protocol: LatencyProtocol | None = None, on_phase: Phase = no_phase, when_busy: str = "warn",
               study: str = "", band: BaselineBand | None = None, give_up_above: float | None = None,
               wait_quiet: Callable[[Phase], object] = wait_until_quiet) -> TrialTiming:
    """The candidate timed holding the device's lock: against the baseline in paired blocks where there is one
    (the ratio in the same window), else alone. band: where the study's undisturbed baseline windows fall; a
    window above it is timed again with a fresh baseline process, at once (RETIMES_WARN) or after a wait for a
    quiet machine (when_busy "wait", RETIMES) and, still above, marked disturbed (guard_record). give_up_above: the
    ratio past which the candidate cannot win (paired timing stops there). wait_quiet: how "wait" waits for a
    quiet machine (a test passes its own: on a machine never quiet the real one waits 30 min)."""
    on_phase(JobPhase.WAITING_FOR_LOCK)
    with timing_lock(device, on_phase, study, "a trial"):
        if when_busy == "wait":
            wait_quiet(on_phase)
        on_phase(JobPhase.TIMING)
        start = time.time()
        retimed = 0
        base = baseline.get() if baseline is not None else None
        while True:
            pids = [candidate.pid] + ([base.pid] if base is not None else [])
            with LoadMeter(with_processes(pids)) as meter:
                if base is not None:
                    latency, base_latency, relative = measure_paired(candidate, base, protocol,
                                                                     give_up_above=give_up_above)
                else:
                    latency, base_latency, relative = measure_alone(candidate, protocol), None, None
            if base_latency is None or band is None or band.holds(base_latency.median_ms):
                break
            baseline.retire()  # a window above the band: its process may be in a slow mode of its own
            if retimed >= (RETIMES if when_busy == "wait" else RETIMES_WARN):
                break
            retimed += 1
            on_phase(f"the baseline read {base_latency.median_ms:.1f} ms, above its band's {band.high_ms:.1f} ms: "
                     "timing again with a fresh baseline process"
                     + (" once the machine is quiet" if when_busy == "wait" else ""))
            if when_busy == "wait":
                wait_quiet(on_phase)
            base = baseline.get()
        processes = {"candidate": candidate.pid} | ({"baseline": base.pid} if base is not None else {})
        return TrialTiming(latency, base_latency, relative, meter.load, (start, time.time()), retimed, processes)


def slow_run_limit(baseline: BaselineProcess | None, give_up_above: float | None) -> tuple[float | None, float | None]:
    """(the accuracy check's limit on a warm run in ms, the baseline's run it comes from): SLOW_RUN x
    give_up_above x one baseline run; (None, None) without a baseline or a bound."""
    if baseline is None or not give_up_above:
        return None, None
    base_ms = baseline.one_run_ms()
    return SLOW_RUN * give_up_above * base_ms, base_ms


@dataclass(frozen=True)
class TimedShape:
    """One set of the workload's shapes as timing needs it: its label (input_ids=1x16), its share of the requests
    and the batch its engines run."""

    label: str
    weight: float
    batch: Batch


def combined(timings: list[TrialTiming], shapes: list[TimedShape]) -> TrialTiming:
    """The workload's timing from its sets' (each timed paired at its shapes): weighted means (measure.workload),
    the most loaded set's load, the whole window, every process. The baseline's processes of all sets are started
    and retired together, so the first set's stands for them where the baseline's process is asked."""
    if len(timings) == 1:
        return timings[0]
    w = [s.weight for s in shapes]
    bases = [t.baseline for t in timings]
    rels = [t.relative for t in timings]
    windows = [t.window for t in timings if t.window]
    return TrialTiming(weighted_stats([t.latency for t in timings], w),
                       weighted_stats(bases, w) if all(bases) else None,
                       weighted_relative(rels, w) if all(rels) else None,
                       max((t.load for t in timings), key=lambda load: load.other_cores),
                       (windows[0][0], windows[-1][1]) if windows else None, sum(t.retimed for t in timings),
                       # the first set's under the one-set names (what the baseline-mode check reads), the others' by set
                       timings[0].processes | {f"{role} {s.label}": pid for t, s in zip(timings[1:], shapes[1:])
                                               for role, pid in t.processes.items()})


def shape_figures(timings: list[TrialTiming], shapes: list[TimedShape], per_case: list[dict]) -> list[dict]:
    """What a trial's record keeps of each set of a workload (search.record.ShapeFigure, stored as a dict)."""
    return [asdict(ShapeFigure(s.label, s.weight, t.latency.median_ms,
                               t.baseline.median_ms if t.baseline else None,
                               t.relative.ratio if t.relative else None,
                               t.relative.ci_low if t.relative else None, t.relative.ci_high if t.relative else None,
                               metrics))
            for t, s, metrics in zip(timings, shapes, per_case or [{}] * len(shapes))]


def trial_record(built: Built, timings: list[TrialTiming] | None, band: BaselineBand | None,
                 base_ms: float | None = None, shapes: list[TimedShape] | None = None) -> TrialRecord:
    """The record of a built candidate: with its timing (one per set of the workload's shapes), or stopped by a
    slow run in its accuracy check (one run each is all there is to say, as in paired timing's warm-up)."""
    workload = None
    if timings is None:
        latency, base_latency, relative = stopped_at(built.slow_ms, base_ms, "slow run")
        load, window, retimed, processes = built.check_load, None, 0, None
    else:
        timing = combined(timings, shapes or [])
        latency, base_latency, relative = timing.latency, timing.baseline, timing.relative
        load, window, retimed = timing.load.to_dict(), timing.window, timing.retimed
        processes = timing.processes
        if len(timings) > 1:
            workload = shape_figures(timings, shapes, built.per_case)
    return TrialRecord(
        config=built.config, latency=latency.to_dict(), metrics=built.metrics, per_output=built.per_output,
        violations=built.violations, feasible=built.feasible,
        build_s=built.build_s, engine_bytes=built.engine_bytes, backend=built.label, engine_dir=built.engine_dir,
        timing_window=list(window) if window else None, timing="paired" if relative is not None else "alone",
        relative=relative.to_dict() if relative else None,
        baseline_latency=base_latency.to_dict() if base_latency else None, load=load,
        baseline_guard=guard_record(band, base_latency.median_ms, retimed) if base_latency and timings else None,
        precision=built.precision or None, processes=processes, workload=workload)


def measure_built(built: Built, shapes: list[TimedShape], baselines: list[BaselineProcess] | None,
                  protocol: LatencyProtocol | None = None, on_phase: Phase = no_phase, when_busy: str = "warn",
                  study: str = "", band: BaselineBand | None = None, give_up_above: float | None = None,
                  base_ms: float | None = None, wait_quiet: Callable[[Phase], object] = wait_until_quiet,
                  start: Start = EngineProcess) -> TrialRecord:
    """A built candidate's trial record: timed in a process of its own (time_trial) at each set of the workload's
    shapes, against the baseline's process at those shapes (baselines: one per set, or None: alone), unless its
    accuracy check already found it too slow to win. With several sets the band guards the workload's baseline
    figure in the record and no set is timed again (each set's baseline has a band of its own to learn)."""
    if built.slow_ms is not None:
        on_phase(f"a run took {built.slow_ms:.0f} ms, over the limit: it cannot win, not timed")
        return trial_record(built, None, band, base_ms)
    timings = []
    for i, shape in enumerate(shapes):
        if len(shapes) > 1:
            on_phase(f"timing at {shape.label}")
        label = f"candidate at {shape.label}" if len(shapes) > 1 else "candidate"
        with start(built.backend, built.engine_dir, shape.batch, label=label) as candidate:
            timings.append(time_trial(candidate, baselines[i] if baselines else None, built.device, protocol,
                                      on_phase, when_busy, study, band if len(shapes) == 1 else None,
                                      give_up_above, wait_quiet))
    return trial_record(built, timings, band, shapes=shapes)


def problem_shapes(problem: Problem) -> list[TimedShape]:
    """The workload's sets as timing needs them: each one's first batch."""
    return [TimedShape(c.label, c.weight, c.batches[0]) for c in problem.cases]


def measure(problem: Problem, config: dict, out_dir: str, protocol: LatencyProtocol | None = None,
            on_phase: Phase = no_phase, baseline: dict | None = None, when_busy: str = "warn", study: str = "",
            band: BaselineBand | None = None, give_up_above: float | None = None,
            wait_quiet: Callable[[Phase], object] = wait_until_quiet) -> TrialRecord:
    """Build, check and time one config from this process (its builds here, its timings each in a process of
    its own): what a trial does through the Evaluator, for scripts and tests. With a baseline config, that
    engine is built too and the candidate is timed against it in paired blocks."""
    base_dir = tempfile.mkdtemp(prefix="tuner-baseline-") if baseline is not None else None
    shapes = problem_shapes(problem)
    start = functools.partial(EngineProcess, in_flight=problem.spec.in_flight or 1)
    bases = None
    try:
        if baseline is not None:
            b = build_checked(problem, baseline, base_dir, check=False, study=study,
                              on_phase=lambda p: on_phase(f"baseline {p}"))
            bases = [BaselineProcess(b.backend, base_dir, s.batch, start=start) for s in shapes]
        limit_ms, base_ms = slow_run_limit(bases[0] if bases else None, give_up_above)
        built = build_checked(problem, config, out_dir, limit_ms, on_phase, study)
        return measure_built(built, shapes, bases, protocol, on_phase, when_busy, study, band,
                             give_up_above, base_ms, wait_quiet, start)
    finally:
        for base in bases or []:
            base.close()
        if base_dir is not None:
            shutil.rmtree(base_dir, ignore_errors=True)


def time_side_by_side(saved: list[tuple[str, str]], batch: Batch, baseline: int, device: str, rounds: int,
                      protocol: LatencyProtocol, on_phase: Phase = no_phase, study: str = "", what: str = "selection",
                      start: Start = EngineProcess) -> tuple[list[tuple[LatencyStats, RelativeLatency]], dict, list[int]]:
    """Engines saved as (backend, folder), each in a process of its own, timed in turn in blocks with
    saved[baseline] (selection, verify): per engine (its latency, its ratio to the baseline), the load, and
    the process ids."""
    procs: list[EngineProcess] = []
    try:
        for i, (backend, folder) in enumerate(saved):
            procs.append(start(backend, folder, batch, label="baseline" if i == baseline else f"engine {i}"))
        pids = [p.pid for p in procs]
        with timing_lock(device, on_phase, study, what), LoadMeter(with_processes(pids)) as meter:
            on_phase("timing side by side")
            samples, converged, _ = time_blocks(procs, protocol, baseline=baseline, max_rounds=rounds)
    finally:
        for p in procs:
            p.close()
    return relative_to(samples, baseline, converged), meter.load.to_dict(), pids


def side_by_side_over(saved: list[tuple[str, str]], shapes: list[TimedShape], baseline: int, device: str, rounds: int,
                      protocol: LatencyProtocol, on_phase: Phase = no_phase, study: str = "", what: str = "selection",
                      start: Start = EngineProcess) -> tuple[list[tuple[LatencyStats, RelativeLatency]], dict, list[int],
                                                             list[list[dict]] | None]:
    """time_side_by_side at each set of the workload's shapes: per engine its weighted figures (measure.workload),
    the most loaded set's load, the first set's process ids, and per engine each set's figures (ShapeFigure as a
    dict; None for one set)."""
    runs = []
    for s in shapes:
        if len(shapes) > 1:
            on_phase(f"{what} at {s.label}")
        runs.append(time_side_by_side(saved, s.batch, baseline, device, rounds, protocol, on_phase, study, what, start))
    if len(runs) == 1:
        return (*runs[0], None)
    w = [s.weight for s in shapes]
    timed = [(weighted_stats([r[0][i][0] for r in runs], w), weighted_relative([r[0][i][1] for r in runs], w))
             for i in range(len(saved))]
    figures = [[asdict(ShapeFigure(s.label, s.weight, r[0][i][0].median_ms, r[0][baseline][0].median_ms,
                                   r[0][i][1].ratio, r[0][i][1].ci_low, r[0][i][1].ci_high))
                for s, r in zip(shapes, runs)] for i in range(len(saved))]
    return timed, max((r[1] for r in runs), key=lambda load: load["other_cores"]), runs[0][2], figures


ALONE_PROCESSES = 5  # fresh processes per engine in the deployment check
ALONE_SECONDS = 1.5  # timed seconds per process (after its warm-up)


@dataclass
class AloneFigure:
    """One engine timed alone: each fresh process's median (ms), and their median."""

    medians_ms: list[float]
    pids: list[int]

    @property
    def median_ms(self) -> float:
        return float(np.median(self.medians_ms))

    def to_dict(self) -> dict:
        return asdict(self) | {"median_ms": self.median_ms}


def time_alone(saved: list[tuple[str, str]], batch: Batch, device: str, processes: int = ALONE_PROCESSES,
               seconds: float = ALONE_SECONDS, on_phase: Phase = no_phase, study: str = "",
               start: Start = EngineProcess) -> list[AloneFigure]:
    """The deployment check: each engine (backend, folder) alone in `processes` fresh processes, one engine's
    process after another's (A B A B ..., the order turned each round), none alive beside another; each
    process warmed up, then timed for `seconds`. The median of its processes' medians is what a user who
    deploys the engine sees, with the variation between processes in it, which one process leaves out."""
    figures = [AloneFigure([], []) for _ in saved]
    order = list(range(len(saved)))
    protocol = LatencyProtocol(warmup=5, min_runs=10, max_runs=100_000, max_seconds=seconds, rel_ci=0.0)
    with timing_lock(device, on_phase, study, "the deployment check"):
        for k in range(processes):
            on_phase(f"timing each engine alone, process {k + 1} of {processes}")
            for i in order if k % 2 == 0 else order[::-1]:
                backend, folder = saved[i]
                with start(backend, folder, batch, label="engine alone") as proc:
                    stats = measure_alone(proc, protocol)
                figures[i].medians_ms.append(stats.median_ms)
                figures[i].pids.append(proc.pid)
    return figures


def alone_ratio(candidate: AloneFigure, baseline: AloneFigure, resamples: int = 1000) -> tuple[float, float, float]:
    """candidate / baseline from the medians of their processes' medians, with a 95% bootstrap interval over
    the processes (the variation between processes is the noise a deployment sees)."""
    a, b = np.asarray(candidate.medians_ms), np.asarray(baseline.medians_ms)
    rng = np.random.default_rng(0)
    boot = (np.median(a[rng.integers(0, len(a), (resamples, len(a)))], axis=1)
            / np.median(b[rng.integers(0, len(b), (resamples, len(b)))], axis=1))
    lo, hi = np.quantile(boot, [0.025, 0.975])
    return float(np.median(a) / np.median(b)), float(lo), float(hi)


def alone_record(candidate: AloneFigure, baseline: AloneFigure) -> dict:
    """What a study and verify store of the deployment check: both figures and the ratio with its interval."""
    return {"winner": candidate.to_dict(), "baseline": baseline.to_dict()} | _ratio_record(*alone_ratio(candidate, baseline))


def _ratio_record(ratio: float, lo: float, hi: float) -> dict:
    """A deployment check's ratio with its interval, and the same as speedups."""
    return {"ratio": ratio, "ci_low": lo, "ci_high": hi, "speedup": 1.0 / ratio, "speedup_low": 1.0 / hi,
            "speedup_high": 1.0 / lo}


def deployed_over(saved: tuple[tuple[str, str], tuple[str, str]], shapes: list[TimedShape], device: str,
                  processes: int = ALONE_PROCESSES, seconds: float = ALONE_SECONDS, on_phase: Phase = no_phase,
                  study: str = "", start: Start = EngineProcess) -> dict:
    """The deployment check of a candidate against the baseline (saved: the two, in that order) at each set of
    the workload's shapes: alone_record's figures, for several sets their weighted means (as a trial's ratio is
    made) with each set's record under "workload"."""
    records = []
    for s in shapes:
        if len(shapes) > 1:
            on_phase(f"the deployment check at {s.label}")
        records.append(alone_record(*time_alone(list(saved), s.batch, device, processes, seconds, on_phase, study,
                                                start)))
    if len(records) == 1:
        return records[0]
    w = [s.weight for s in shapes]
    return (_ratio_record(*(weighted_mean([r[k] for r in records], w) for k in ("ratio", "ci_low", "ci_high")))
            | {"workload": [r | {"shapes": s.label, "weight": s.weight} for r, s in zip(records, shapes)]})
