"""The jobs that run in an isolated child process (tuner.execute.isolate), and Evaluator, the parent's handle on
them. Trials, sensitivity, selection, export and verify all build through it, so a crash in a backend (a
segfault in calibration, an OOM kill) fails one job and never the tuning process. A child keeps the
problem it loaded (a persistent one serves many jobs), and loads it from the parent's checked spec."""
from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from ..backends.base import Engine, engine_precision, get_backend
from ..measure.guard import BaselineBand
from ..measure.latency import LatencyProtocol, measure_latency
from ..measure.load import LoadMeter
from ..measure.paired import measure_paired, relative_to, time_blocks
from ..problem.spec import Problem, ProblemSpec
from ..search.record import TrialRecord
from ..store import cache
from ..store.locks import TimingLockWaits, timing_lock
from .evaluate import Phase, backend_of, build, check_accuracy, measure, no_phase
from .isolate import IsolatedRunner
from .profiling import engine_node_times

_LOADED: dict[str, Problem] = {}  # a persistent child keeps its problem (model, data, reference) loaded


def loaded_problem(spec: dict, cache_dir: str) -> Problem:
    os.environ[cache.CACHE_ENV] = cache_dir  # the forkserver's environment may predate the caller's
    key = repr(sorted(spec.items()))
    if key not in _LOADED:
        _LOADED.clear()
        _LOADED[key] = ProblemSpec(**spec).load()
    return _LOADED[key]


def measure_job(spec: dict, cache_dir: str, config: dict, out_dir: str, protocol: dict | None,
                baseline: dict | None = None, when_busy: str = "warn", study: str = "",
                on_phase: Phase = no_phase, band: dict | None = None, give_up_above: float | None = None) -> dict:
    on_phase("loading the model and reference")
    problem = loaded_problem(spec, cache_dir)
    return measure(problem, config, out_dir, LatencyProtocol(**protocol) if protocol else None, on_phase, baseline,
                   when_busy, study, BaselineBand.from_dict(band), give_up_above).to_dict()


@contextlib.contextmanager
def _checked_engine(problem: Problem, config: dict, on_phase: Phase, study: str = ""):
    """Build `config` in a temporary folder and check its accuracy: yields (engine, backend, metrics,
    per_output); the engine is closed and its folder removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="tuner-job-") as work:
        engine, backend, _ = build(problem, config, work, on_phase, study=study)
        try:
            on_phase("accuracy check")
            yield (engine, backend, *check_accuracy(problem, engine))
        finally:
            engine.close()


def accuracy_job(spec: dict, cache_dir: str, config: dict, protocol: dict | None, on_phase: Phase = no_phase,
                 study: str = "", baseline: dict | None = None) -> dict:
    """Error metrics of one build (sensitivity), and with a protocol its latency (untimed by others:
    a quick figure for the ranking, not a trial's measurement). With a baseline config too, that engine
    is built as well and the two are timed in turn (paired): "ratio" is the build's latency over the
    baseline's in the same window, "baseline_ms" the baseline's."""
    problem = loaded_problem(spec, cache_dir)
    with _checked_engine(problem, config, on_phase, study) as (engine, backend, metrics, _):
        out: dict[str, Any] = {"metrics": metrics, "feasible": problem.requirement.holds(metrics)}
        if protocol and baseline is not None:
            with tempfile.TemporaryDirectory(prefix="tuner-job-base-") as work:
                base, _, _ = build(problem, baseline, work, lambda p: on_phase(f"baseline {p}"), study=study)
                try:
                    with timing_lock(backend.device, on_phase, study, "an analysis"):
                        on_phase("timing")
                        cand, base_stats, rel = measure_paired(engine.timed_call(problem.batches[0]),
                                                               base.timed_call(problem.batches[0]),
                                                               LatencyProtocol(**protocol))
                finally:
                    base.close()
            out |= {"median_ms": cand.median_ms, "baseline_ms": base_stats.median_ms, "ratio": rel.ratio}
        elif protocol:
            with timing_lock(backend.device, on_phase, study, "an analysis"):
                on_phase("timing")
                out["median_ms"] = measure_latency(engine.timed_call(problem.batches[0]),
                                                   LatencyProtocol(**protocol)).median_ms
    return out


def node_times_job(spec: dict, cache_dir: str, backend: str, on_phase: Phase = no_phase,
                   study: str = "") -> dict[str, float]:
    """Each node's share of the fp32 run time, from the backend's profiler; {} where it has none."""
    problem = loaded_problem(spec, cache_dir)
    on_phase("profiling")
    with tempfile.TemporaryDirectory(prefix="tuner-prof-") as work:
        return get_backend(backend).node_times(problem.model, problem.batches[:1], work)


def profile_job(spec: dict, cache_dir: str, configs: list[dict], on_phase: Phase = no_phase,
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
                    on_phase("profiling")
                    out.append(engine_node_times(backend.name, engine, problem.batches[0],
                                                 os.path.join(work, f"profile-{i}")))
            finally:
                engine.close()
    return out


def confirm_job(spec: dict, cache_dir: str, configs: list[dict], baseline: int, rounds: int,
                on_phase: Phase = no_phase, study: str = "", save_dir: str | None = None) -> dict:
    """Rebuild every config, check its accuracy again and time them all side by side in blocks with
    configs[baseline] (selection). A config that fails to build is reported with its reason; the
    others are still compared. Returns {"results": [per config], "load": the machine's load}. With
    save_dir, each engine timed is saved, after its timing, into save_dir/INDEX (its result's "saved":
    the main file's name there, or "save_error"), for the parent to upload as the engine that was timed."""
    problem = loaded_problem(spec, cache_dir)
    results: list[dict] = []
    engines: list[Engine] = []
    devices: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="tuner-select-") as work:
        try:
            for i, config in enumerate(configs):
                try:
                    engine, backend, _ = build(problem, config, os.path.join(work, str(i)), on_phase, study=study)
                except Exception as exc:  # noqa: BLE001  one finalist failing is a result, not the end
                    if i == baseline:
                        raise
                    results.append({"error": f"{type(exc).__name__}: {exc}"})
                    continue
                on_phase("accuracy check")
                metrics, _ = check_accuracy(problem, engine)
                results.append({"metrics": metrics, "feasible": problem.requirement.holds(metrics)})
                engines.append(engine)
                devices.add(backend.device)
            built = [r for r in results if "error" not in r]
            base_at = sum(1 for r in results[:baseline] if "error" not in r)  # the baseline among the built
            with timing_lock(sorted(devices)[0], on_phase, study, "selection"), LoadMeter() as meter:
                on_phase("timing side by side")
                samples, converged, _ = time_blocks([e.timed_call(problem.batches[0]) for e in engines],
                                                 LatencyProtocol(max_seconds=60.0), baseline=base_at, max_rounds=rounds)
            for r, e in zip(built, engines):  # what each engine timed computes in, asked after the timing
                r["precision"] = engine_precision(e)
            if save_dir is not None:
                on_phase("saving the engines timed")
                _save_timed(engines, [i for i, r in enumerate(results) if "error" not in r], results, save_dir)
        finally:
            for e in engines:
                e.close()
    for r, (stats, rel) in zip(built, relative_to(samples, base_at, converged)):
        r["latency"], r["relative"] = stats.to_dict(), rel.to_dict()
    return {"results": results, "load": meter.load.to_dict()}


def _save_timed(engines: list[Engine], indices: list[int], results: list[dict], save_dir: str) -> None:
    """engines[k] (configs[indices[k]]) saved into save_dir/INDEX; a failure to save is that result's note."""
    for engine, i in zip(engines, indices):
        folder = os.path.join(save_dir, str(i))
        try:
            results[i]["saved"] = os.path.relpath(engine.save(folder), folder)
        except Exception as exc:  # noqa: BLE001  the timing stands; only this engine is not kept
            results[i]["save_error"] = f"{type(exc).__name__}: {exc}"


def export_job(spec: dict, cache_dir: str, config: dict, out_dir: str, on_phase: Phase = no_phase,
               study: str = "") -> dict:
    """Rebuild `config`, check its accuracy and save the engine into out_dir."""
    problem = loaded_problem(spec, cache_dir)
    with _checked_engine(problem, config, on_phase, study) as (engine, backend, metrics, per_output):
        on_phase("saving")
        path = engine.save(out_dir)
        precision = engine_precision(engine)
    return {"metrics": metrics, "per_output": per_output, "engine": path, "backend": backend.name,
            "usage": backend.usage(out_dir), "precision": precision}


def load_job(spec: dict, cache_dir: str, config: dict, engine_dir: str, main: str | None = None,
             on_phase: Phase = no_phase, study: str = "") -> dict:
    """Load the engine in engine_dir (an uploaded one, downloaded by export) with the backend of `config`
    and check its accuracy; what export_job returns, without building or writing anything."""
    problem = loaded_problem(spec, cache_dir)
    backend = backend_of(problem, config)
    on_phase("loading the engine")
    engine = backend.load(engine_dir)
    try:
        on_phase("accuracy check")
        metrics, per_output = check_accuracy(problem, engine)
        precision = engine_precision(engine)
    finally:
        engine.close()
    return {"metrics": metrics, "per_output": per_output, "engine": os.path.join(engine_dir, main or ""),
            "backend": backend.name, "usage": backend.usage(engine_dir), "precision": precision}


def verify_job(spec: dict, cache_dir: str, config: dict, baseline: dict, engine_dir: str | None, backend: str | None,
               protocol: dict | None, on_phase: Phase = no_phase, study: str = "") -> dict:
    """The winner against the backend's defaults, in this fresh process, timed in paired blocks as a
    user checking the claim would: the exported engine loaded from engine_dir, or `config` rebuilt."""
    problem = loaded_problem(spec, cache_dir)
    with tempfile.TemporaryDirectory(prefix="tuner-verify-") as work:
        if engine_dir:
            on_phase("loading the exported engine")
            engine, used = get_backend(backend).load(engine_dir), get_backend(backend)
        else:
            engine, used, _ = build(problem, config, os.path.join(work, "winner"), on_phase, study=study)
        base_engine = None
        try:
            on_phase("accuracy check")
            metrics, _ = check_accuracy(problem, engine)
            base_engine, _, _ = build(problem, baseline, os.path.join(work, "defaults"), on_phase, study=study)
            with timing_lock(used.device, on_phase, study, "verify"), LoadMeter() as meter:
                on_phase("timing")
                cand, base, rel = measure_paired(engine.timed_call(problem.batches[0]),
                                                 base_engine.timed_call(problem.batches[0]),
                                                 LatencyProtocol(**protocol) if protocol else None)
        finally:
            engine.close()
            if base_engine is not None:
                base_engine.close()
    return {"latency": cand.to_dict(), "baseline_latency": base.to_dict(), "relative": rel.to_dict(),
            "metrics": metrics, "feasible": problem.requirement.holds(metrics), "load": meter.load.to_dict()}


class Evaluator:
    """The parent's handle on the jobs of one problem: each runs in an isolated child, and a crash,
    hang or error raises TrialFailure with the reason. persistent=True keeps one child (and the
    loaded problem) across jobs, for the many small builds of a sensitivity analysis. study: the study
    whose trials share the backends' compile caches (TensorRT's timing cache), "" outside a study."""

    def __init__(self, spec: ProblemSpec | dict, timeout_s: float = 600.0, protocol: LatencyProtocol | None = None,
                 persistent: bool = False, baseline: dict | None = None, when_busy: str = "warn", study: str = ""):
        """baseline: the config every measured candidate is timed against (paired timing); None: alone.
        study: the study's name, for backends that keep study-wide state (TensorRT's timing cache)."""
        self.spec = asdict(spec) if isinstance(spec, ProblemSpec) else dict(spec)
        self.study = study
        self.timeout_s = timeout_s
        self.protocol = protocol
        self.baseline = baseline
        self.when_busy = when_busy
        self.lock_waits = TimingLockWaits(study)  # says when another study holds the timing lock
        self._runner = IsolatedRunner(persistent, on_phase=self.lock_waits.on_phase)

    def _call(self, fn: Callable, **kwargs) -> Any:
        return self._runner.call(fn, {"spec": self.spec, "cache_dir": cache.cache_dir(), "study": self.study, **kwargs},
                                 self.timeout_s)

    def measure(self, config: dict, out_dir: str, band: BaselineBand | None = None,
                give_up_above: float | None = None) -> TrialRecord:
        rec = self._call(measure_job, config=config, out_dir=out_dir,
                         protocol=asdict(self.protocol) if self.protocol else None, baseline=self.baseline,
                         when_busy=self.when_busy, band=band.to_dict() if band else None, give_up_above=give_up_above)
        return TrialRecord.from_dict(rec)

    def accuracy(self, config: dict, timing: LatencyProtocol | None = None, baseline: dict | None = None) -> dict:
        """Metrics of one build; with timing its quick latency, against `baseline` in turn where given."""
        return self._call(accuracy_job, config=config, protocol=asdict(timing) if timing else None, baseline=baseline)

    def node_times(self, backend: str) -> dict[str, float]:
        return self._call(node_times_job, backend=backend)

    def profile(self, configs: list[dict]) -> list[list[dict]]:
        """Per-node times of each config's engine from its backend's profiler (tuner.execute.profiling)."""
        return self._call(profile_job, configs=configs)

    def confirm(self, configs: list[dict], baseline: int, rounds: int = 30, save_dir: str | None = None) -> dict:
        return self._call(confirm_job, configs=configs, baseline=baseline, rounds=rounds, save_dir=save_dir)

    def verify(self, config: dict, baseline: dict, engine_dir: str | None = None, backend: str | None = None,
               protocol: LatencyProtocol | None = None) -> dict:
        return self._call(verify_job, config=config, baseline=baseline, engine_dir=engine_dir, backend=backend,
                          protocol=asdict(protocol) if protocol else None)

    def export(self, config: dict, out_dir: str) -> dict:
        return self._call(export_job, config=config, out_dir=out_dir)

    def load(self, config: dict, engine_dir: str, main: str | None = None) -> dict:
        """Check the accuracy of a saved engine of `config` (export of a downloaded artifact)."""
        return self._call(load_job, config=config, engine_dir=engine_dir, main=main)

    def close(self) -> None:
        self._runner.close()

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
