"""The jobs that run in an isolated child process (tuner.execute.isolate), and Evaluator, the parent's handle on
them. Trials, sensitivity, selection, export and verify all build through it, so a crash in a backend (a
segfault in calibration, an OOM kill) fails one job and never the tuning process. A child keeps the
problem it loaded (a persistent one serves many jobs), and loads it from the parent's checked spec.
The child builds and saves; the timings of trials, selection and verify happen in processes of their own,
one per engine, driven by the Evaluator (tuner.execute.timing)."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

from ..backends.base import engine_precision, get_backend
from ..errors import JobPhase
from ..measure.guard import BaselineBand
from ..measure.latency import LatencyProtocol, measure_latency
from ..measure.paired import measure_paired
from ..problem.spec import LoadedSpec, Problem, ProblemSpec
from ..search.record import TrialRecord
from ..store import cache
from ..store.locks import TimingLockWaits, timing_lock
from .engine_process import EngineProcess
from .evaluate import (
    Built,
    Phase,
    activation_errors,
    backend_of,
    build,
    build_checked,
    check_accuracy,
    no_phase,
    tell_backend,
)
from .isolate import IsolatedRunner
from .profiling import engine_node_times
from .results import Confirmation, Confirmed, QuickCheck, Rebuilt, SavedEngine, Verified, VerifyBuilds
from .timing import (
    ALONE_PROCESSES,
    ALONE_SECONDS,
    AloneFigure,
    BaselineProcess,
    TimedShape,
    deployed_over,
    measure_built,
    problem_shapes,
    side_by_side_over,
    slow_run_limit,
    time_alone,
)


class OutOfTime(Exception):
    """The evaluator's deadline passed: no job starts (the study's --timeout, during its analysis)."""


# What every job gets of its problem: the parent's LoadedSpec (trusted), or a ProblemSpec's fields (loaded and checked)
JobSpec = LoadedSpec | dict

_LOADED: dict[str, Problem] = {}  # a persistent child keeps its problem (model, data, reference) loaded


def loaded_problem(spec: JobSpec, cache_dir: str) -> Problem:
    """The problem of a job: a LoadedSpec (the parent's, trusted: no requirement parsed, no model hashed, no space
    checked here) or a spec's fields (a script's: loaded and checked), kept loaded for the next job of this child."""
    os.environ[cache.CACHE_ENV] = cache_dir  # the forkserver's environment may predate the caller's
    key = repr(spec) if isinstance(spec, LoadedSpec) else repr(sorted(spec.items()))
    if key not in _LOADED:
        _LOADED.clear()
        _LOADED[key] = spec.load() if isinstance(spec, LoadedSpec) else ProblemSpec(**spec).load()
    return _LOADED[key]


def build_job(spec: JobSpec, cache_dir: str, config: dict, out_dir: str, limit_ms: float | None = None,
              check: bool = True, study: str = "", on_phase: Phase = no_phase) -> Built:
    """A candidate built, checked and saved into out_dir for its timing process (evaluate.build_checked)."""
    on_phase(JobPhase.LOADING)
    problem = loaded_problem(spec, cache_dir)
    return build_checked(problem, config, out_dir, limit_ms, on_phase, study, check)


def shapes_job(spec: JobSpec, cache_dir: str, study: str = "", on_phase: Phase = no_phase) -> list[TimedShape]:
    """What every timing runs: per set of the workload's shapes, its first batch."""
    return problem_shapes(loaded_problem(spec, cache_dir))


def told_job(spec: JobSpec, cache_dir: str, built: Built, median_ms: float, feasible: bool, study: str = "",
             on_phase: Phase = no_phase) -> None:
    """Backend.measured after a timing, for a backend that hears timings (evaluate.tell_backend)."""
    tell_backend(loaded_problem(spec, cache_dir), built, median_ms, feasible, study)


@contextlib.contextmanager
def _checked_engine(problem: Problem, config: dict, on_phase: Phase, study: str = ""):
    """Build `config` in a temporary folder and check its accuracy: yields (engine, backend, metrics,
    per_output); the engine is closed and its folder removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="tuner-job-") as work:
        engine, backend, _ = build(problem, config, work, on_phase, study=study)
        try:
            on_phase(JobPhase.ACCURACY_CHECK)
            yield (engine, backend, *check_accuracy(problem, engine))
        finally:
            engine.close()


def accuracy_job(spec: JobSpec, cache_dir: str, config: dict, protocol: dict | None, on_phase: Phase = no_phase,
                 study: str = "", baseline: dict | None = None) -> QuickCheck:
    """Error metrics of one build (sensitivity), and with a protocol its latency (untimed by others:
    a quick figure for the ranking, not a trial's measurement). With a baseline config too, that engine
    is built as well and the two are timed in turn (paired): "ratio" is the build's latency over the
    baseline's in the same window, "baseline_ms" the baseline's."""
    problem = loaded_problem(spec, cache_dir)
    with _checked_engine(problem, config, on_phase, study) as (engine, backend, metrics, _):
        out = QuickCheck(metrics, problem.requirement.holds(metrics))
        if protocol and baseline is not None:
            with tempfile.TemporaryDirectory(prefix="tuner-job-base-") as work:
                base, _, _ = build(problem, baseline, work, lambda p: on_phase(f"baseline {p}"), study=study)
                try:
                    with timing_lock(backend.device, on_phase, study, "an analysis"):
                        on_phase(JobPhase.TIMING)
                        cand, base_stats, rel = measure_paired(engine.timed_call(problem.batches[0]),
                                                               base.timed_call(problem.batches[0]),
                                                               LatencyProtocol(**protocol))
                finally:
                    base.close()
            out = replace(out, median_ms=cand.median_ms, baseline_ms=base_stats.median_ms, ratio=rel.ratio,
                          ratio_ci=(rel.ci_low, rel.ci_high))
        elif protocol:
            with timing_lock(backend.device, on_phase, study, "an analysis"):
                on_phase(JobPhase.TIMING)
                out = replace(out, median_ms=measure_latency(engine.timed_call(problem.batches[0]),
                                                             LatencyProtocol(**protocol)).median_ms)
    return out


def activations_job(spec: JobSpec, cache_dir: str, float_config: dict, quantized_config: dict, tensors: list[str],
                    on_phase: Phase = no_phase, study: str = "") -> dict[str, float] | None:
    """The one-pass sensitivity's measurement: each tensor's relative error, quantized against float."""
    return activation_errors(loaded_problem(spec, cache_dir), float_config, quantized_config, tensors, on_phase, study)


def node_times_job(spec: JobSpec, cache_dir: str, backend: str, on_phase: Phase = no_phase,
                   study: str = "") -> dict[str, float]:
    """Each node's share of the fp32 run time, from the backend's profiler; {} where it has none."""
    problem = loaded_problem(spec, cache_dir)
    on_phase(JobPhase.PROFILING)
    with tempfile.TemporaryDirectory(prefix="tuner-prof-") as work:
        return get_backend(backend).node_times(problem.model, problem.batches[:1], work)


def profile_job(spec: JobSpec, cache_dir: str, configs: list[dict], on_phase: Phase = no_phase,
                study: str = "") -> list[list[dict]]:
    """Each config built and run under its backend's profiler, holding the device's timing lock: per config,
    its runtime nodes' median times (tuner.execute.profiling.engine_node_times). `tuner profile`."""

    problem = loaded_problem(spec, cache_dir)
    out = []
    with tempfile.TemporaryDirectory(prefix="tuner-profile-") as work:
        for i, config in enumerate(configs):
            engine, backend, _ = build(problem, config, os.path.join(work, str(i)), on_phase, study=study)
            try:
                with timing_lock(backend.device, on_phase, study, "profile"):
                    on_phase(JobPhase.PROFILING)
                    out.append(engine_node_times(backend.name, engine, problem.batches[0],
                                                 os.path.join(work, f"profile-{i}")))
            finally:
                engine.close()
    return out


def confirm_job(spec: JobSpec, cache_dir: str, configs: list[dict], baseline: int, work_dir: str,
                on_phase: Phase = no_phase, study: str = "") -> list[Rebuilt | str]:
    """Rebuild every config into work_dir/INDEX, check its accuracy again and save it there for its timing
    process (selection). A config that fails to build (or to save) is reported with its reason (a str); the
    others are still compared."""
    problem = loaded_problem(spec, cache_dir)
    results: list[Rebuilt | str] = []
    for i, config in enumerate(configs):
        folder = os.path.join(work_dir, str(i))
        try:
            built = build_checked(problem, config, folder, on_phase=on_phase, study=study)
        except Exception as exc:  # noqa: BLE001  one finalist failing is a result, not the end
            if i == baseline:
                raise
            results.append(f"{type(exc).__name__}: {exc}")
            continue
        results.append(Rebuilt(built.metrics, problem.requirement.holds(built.metrics), built.precision,
                               built.backend, built.device, built.main))
    return results


def export_job(spec: JobSpec, cache_dir: str, config: dict, out_dir: str, on_phase: Phase = no_phase,
               study: str = "") -> SavedEngine:
    """Rebuild `config`, check its accuracy and save the engine into out_dir."""
    problem = loaded_problem(spec, cache_dir)
    with _checked_engine(problem, config, on_phase, study) as (engine, backend, metrics, per_output):
        on_phase(JobPhase.SAVING)
        path = engine.save(out_dir)
        precision = engine_precision(engine)
    return SavedEngine(metrics, per_output, path, backend.name, backend.usage(out_dir), precision)


def load_job(spec: JobSpec, cache_dir: str, config: dict, engine_dir: str, main: str | None = None,
             on_phase: Phase = no_phase, study: str = "") -> SavedEngine:
    """Load the engine in engine_dir (an uploaded one, downloaded by export) with the backend of `config`
    and check its accuracy; what export_job returns, without building or writing anything."""
    problem = loaded_problem(spec, cache_dir)
    backend = backend_of(problem, config)
    on_phase("loading the engine")
    engine = backend.load(engine_dir)
    try:
        on_phase(JobPhase.ACCURACY_CHECK)
        metrics, per_output = check_accuracy(problem, engine)
        precision = engine_precision(engine)
    finally:
        engine.close()
    return SavedEngine(metrics, per_output, os.path.join(engine_dir, main or ""), backend.name,
                       backend.usage(engine_dir), precision)


def verify_job(spec: JobSpec, cache_dir: str, config: dict, baseline: dict, engine_dir: str | None, backend: str | None,
               work_dir: str, on_phase: Phase = no_phase, study: str = "") -> VerifyBuilds:
    """What verify times, ready for their processes: the winner (the exported engine in engine_dir, loaded
    and checked here, or `config` rebuilt into work_dir/winner) and the backend's defaults built into
    work_dir/defaults."""
    problem = loaded_problem(spec, cache_dir)
    if engine_dir:
        on_phase("loading the exported engine")
        used = get_backend(backend)
        engine = used.load(engine_dir)
        try:
            on_phase(JobPhase.ACCURACY_CHECK)
            metrics, _ = check_accuracy(problem, engine)
        finally:
            engine.close()
        winner = (used.name, engine_dir)
        device = used.device
    else:
        built = build_checked(problem, config, os.path.join(work_dir, "winner"), on_phase=on_phase, study=study)
        metrics, winner, device = built.metrics, (built.backend, built.engine_dir), built.device
    base = build_checked(problem, baseline, os.path.join(work_dir, "defaults"), check=False, study=study,
                         on_phase=lambda p: on_phase(f"defaults {p}"))
    return VerifyBuilds(winner, (base.backend, base.engine_dir), device, metrics, problem.requirement.holds(metrics))


class Evaluator:
    """The parent's handle on the jobs of one problem: each runs in an isolated child, and a crash,
    hang or error raises TrialFailure with the reason. persistent=True keeps one child (and the
    loaded problem) across jobs, for the many small builds of a sensitivity analysis. study: the study
    whose trials share the backends' compile caches (TensorRT's timing cache), "" outside a study.
    Timings happen here, each engine in a process of its own (tuner.execute.timing); the baseline's
    engine is built once and its process serves several trials."""

    def __init__(self, spec: LoadedSpec | ProblemSpec | dict, timeout_s: float = 600.0, protocol: LatencyProtocol | None = None,
                 persistent: bool = False, baseline: dict | None = None, when_busy: str = "warn", study: str = "",
                 deadline: float | None = None, clock: Callable[[], float] = time.monotonic,
                 log_path: str | None = None):
        """baseline: the config every measured candidate is timed against (paired timing); None: alone.
        study: the study's name, for backends that keep study-wide state (TensorRT's timing cache).
        deadline: clock() past which no job starts (OutOfTime): the study's --timeout bounds its analysis.
        log_path: where the children's own output goes (the study's trials log); None: the terminal."""
        # what each job gets: a LoadedSpec as the parent made it, or a spec's fields (its child checks them)
        self.spec = spec if isinstance(spec, LoadedSpec) else asdict(spec) if isinstance(spec, ProblemSpec) else dict(spec)
        in_flight = spec.spec.in_flight if isinstance(spec, LoadedSpec) else self.spec.get("in_flight")
        self.in_flight = in_flight or 1  # requests in flight in each timed run (--throughput)
        self.study = study
        self.timeout_s = timeout_s
        self.protocol = protocol
        self.baseline = baseline
        self.when_busy = when_busy
        self.lock_waits = TimingLockWaits(study)  # says when another study holds the timing lock
        self._runner = IsolatedRunner(persistent, on_phase=self.lock_waits.on_phase, log_path=log_path)
        self.deadline, self._clock = deadline, clock
        self._shapes: list[TimedShape] | None = None
        self._bases: list[BaselineProcess] | None = None
        self._base_dir: str | None = None

    def _call(self, fn: Callable, **kwargs) -> Any:
        if self.deadline is not None and self._clock() >= self.deadline:
            raise OutOfTime("the study's --timeout ran out")
        return self._runner.call(fn, {"spec": self.spec, "cache_dir": cache.cache_dir(), "study": self.study, **kwargs},
                                 self.timeout_s)

    def shapes(self) -> list[TimedShape]:
        """The workload's sets with the batch each one's timings run, asked of the child once."""
        if self._shapes is None:
            self._shapes = self._call(shapes_job)
        return self._shapes

    def batch(self) -> dict:
        """The batch one-set timings run (the analysis's): the first set's."""
        return self.shapes()[0].batch

    def _start(self, backend: str, folder: str, batch: dict, label: str = "engine") -> EngineProcess:
        return EngineProcess(backend, folder, batch, timeout_s=self.timeout_s, label=label, in_flight=self.in_flight)

    def baseline_processes(self) -> list[BaselineProcess] | None:
        """The baseline engine, built once into a folder of this evaluator's, in a process per set of the
        workload's shapes (None: alone)."""
        if self.baseline is None:
            return None
        if self._bases is None:
            self._base_dir = tempfile.mkdtemp(prefix="tuner-baseline-")
            built = self._call(build_job, config=self.baseline, out_dir=self._base_dir, check=False)
            self._bases = [BaselineProcess(built.backend, self._base_dir, s.batch, start=self._start)
                           for s in self.shapes()]
        return self._bases

    def measure(self, config: dict, out_dir: str, band: BaselineBand | None = None,
                give_up_above: float | None = None) -> TrialRecord:
        """Build and check `config` in the child, then time it in a process of its own against the baseline's."""
        bases = self.baseline_processes()
        limit_ms, base_ms = slow_run_limit(bases[0] if bases else None, give_up_above)
        built = self._call(build_job, config=config, out_dir=out_dir, limit_ms=limit_ms)
        rec = measure_built(built, self.shapes(), bases, self.protocol, self.lock_waits.on_phase, self.when_busy,
                            self.study, band, give_up_above, base_ms, start=self._start)
        if built.hears_timing:
            self._call(told_job, built=built, median_ms=rec.median_ms, feasible=rec.feasible)
        return rec

    def accuracy(self, config: dict, timing: LatencyProtocol | None = None, baseline: dict | None = None) -> QuickCheck:
        """Metrics of one build; with timing its quick latency, against `baseline` in turn where given."""
        return self._call(accuracy_job, config=config, protocol=asdict(timing) if timing else None, baseline=baseline)

    def activation_errors(self, float_config: dict, quantized_config: dict, tensors: list[str]) -> dict[str, float] | None:
        """Each tensor's relative error in one quantized run against one float run; None: the backend cannot say."""
        return self._call(activations_job, float_config=float_config, quantized_config=quantized_config, tensors=tensors)

    def node_times(self, backend: str) -> dict[str, float]:
        return self._call(node_times_job, backend=backend)

    def profile(self, configs: list[dict]) -> list[list[dict]]:
        """Per-node times of each config's engine from its backend's profiler (tuner.execute.profiling)."""
        return self._call(profile_job, configs=configs)

    def confirm(self, configs: list[dict], baseline: int, rounds: int = 30, save_dir: str | None = None) -> Confirmation:
        """Every config rebuilt and checked again (in the child), saved into save_dir/INDEX (a folder of its own
        where none is given), then all timed side by side with configs[baseline], each in a process of its own."""
        work = save_dir or tempfile.mkdtemp(prefix="tuner-select-")
        try:
            rebuilt = self._call(confirm_job, configs=configs, baseline=baseline, work_dir=work)
            built = [i for i, r in enumerate(rebuilt) if isinstance(r, Rebuilt)]
            saved = [(rebuilt[i].backend, os.path.join(work, str(i))) for i in built]
            timed, load, pids, figures = side_by_side_over(
                saved, self.shapes(), built.index(baseline), sorted(rebuilt[i].device for i in built)[0], rounds,
                LatencyProtocol(max_seconds=60.0), self.lock_waits.on_phase, self.study, "selection", self._start)
        finally:
            if save_dir is None:
                shutil.rmtree(work, ignore_errors=True)
        out = [Confirmed(error=r) if isinstance(r, str) else None for r in rebuilt]
        for k, (i, (stats, rel), pid) in enumerate(zip(built, timed, pids)):
            out[i] = Confirmed(rebuilt[i], None, stats, rel, pid, figures[k] if figures else None)
        return Confirmation(out, load)

    def alone(self, saved: list[tuple[str, str]], device: str = "cpu", processes: int = ALONE_PROCESSES,
              seconds: float = ALONE_SECONDS) -> list[AloneFigure]:
        """The deployment check: each saved engine (backend, folder) alone in several fresh processes."""
        return time_alone(saved, self.batch(), device, processes, seconds, self.lock_waits.on_phase, self.study,
                          self._start)

    def deployed(self, saved: tuple[tuple[str, str], tuple[str, str]], device: str = "cpu",
                 processes: int = ALONE_PROCESSES, seconds: float = ALONE_SECONDS) -> dict:
        """The deployment check of a candidate against the baseline (saved, in that order) over the workload."""
        return deployed_over(saved, self.shapes(), device, processes, seconds, self.lock_waits.on_phase, self.study,
                             self._start)

    def verify(self, config: dict, baseline: dict, engine_dir: str | None = None, backend: str | None = None,
               protocol: LatencyProtocol | None = None, alone_processes: int = ALONE_PROCESSES) -> Verified:
        """The winner (the exported engine in engine_dir, else `config` rebuilt) against the backend's defaults as
        a user checking the claim would time them: each in a process of its own, in paired blocks, then each
        alone in several fresh processes (alone_processes; 0: not)."""
        with tempfile.TemporaryDirectory(prefix="tuner-verify-") as work:
            got: VerifyBuilds = self._call(verify_job, config=config, baseline=baseline, engine_dir=engine_dir,
                                           backend=backend, work_dir=work)
            [(cand, rel), (base, _)], load, pids, figures = side_by_side_over(
                [got.winner, got.defaults], self.shapes(), 1, got.device, None, protocol or LatencyProtocol(),
                self.lock_waits.on_phase, self.study, "verify", self._start)
            alone = self.deployed((got.winner, got.defaults), got.device, alone_processes) if alone_processes else None
        return Verified(cand, base, rel, got.metrics, got.feasible, load, {"winner": pids[0], "defaults": pids[1]},
                        figures[0] if figures else None, alone)

    def export(self, config: dict, out_dir: str) -> SavedEngine:
        return self._call(export_job, config=config, out_dir=out_dir)

    def load(self, config: dict, engine_dir: str, main: str | None = None) -> SavedEngine:
        """Check the accuracy of a saved engine of `config` (export of a downloaded artifact)."""
        return self._call(load_job, config=config, engine_dir=engine_dir, main=main)

    def close(self) -> None:
        self._runner.close()
        for base in self._bases or []:
            base.close()
        self._bases = None
        if self._base_dir is not None:
            shutil.rmtree(self._base_dir, ignore_errors=True)
            self._base_dir = None

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
