"""Build a candidate through its backend and measure it: accuracy against the fp32 reference, then
latency under the device's timing lock. Backend-neutral.

The jobs at the bottom are what runs in an isolated child (tuner.isolate); Evaluator is the parent's
handle on them. Trials, sensitivity analysis, selection and export all build through it, so a crash
in a backend (a segfault in calibration, an OOM kill) fails one job and never the tuning process.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from dataclasses import asdict
from typing import Any, Callable

from . import cache
from .backends.base import Backend, BuildContext, Engine, get_backend
from .isolate import IsolatedRunner
from .locks import default_lock_path, device_lock
from .measure.accuracy import compute_metrics, load_user_metric
from .measure.latency import LatencyProtocol, measure_latency
from .measure.guard import BaselineBand, guard_record
from .measure.load import LoadMeter, wait_until_quiet
from .measure.paired import SLOW_RUN, Clock, measure_paired, relative_to, stopped_at, time_blocks
from .problem import Problem, ProblemSpec
from .record import TrialRecord
from .reference import reference_outputs

Phase = Callable[[str], None]


def _no_phase(name: str) -> None:
    pass


def backend_of(problem: Problem, config: dict) -> Backend:
    """The backend that builds `config`: its `backend` choice in a space over several, else the space's."""
    return get_backend(config.get("backend") or problem.space.backends[0])


def ensure_reference(problem: Problem) -> list:
    if problem.refs is None:
        problem.refs = reference_outputs(problem.model_path, problem.model_hash, problem.data_hash, problem.batches)
    return problem.refs


def build(problem: Problem, config: dict, workdir: str, on_phase: Phase = _no_phase,
          side_by_side: bool = False, study: str = "") -> tuple[Engine, Backend, float]:
    """Build and load the engine of `config` into workdir; returns (engine, its backend, build seconds).
    study: the study whose trials share the backend's compile caches ("" outside a study)."""
    backend = backend_of(problem, config)
    os.makedirs(workdir, exist_ok=True)
    ctx = BuildContext(workdir, problem.shapes, problem.calib, problem.calib_key, cache.cache_dir(), on_phase,
                       side_by_side, study)
    t0 = time.perf_counter()
    engine = backend.build(problem.model, config, ctx)
    return engine, backend, time.perf_counter() - t0


def check_accuracy(problem: Problem, engine: Engine) -> tuple[dict, dict]:
    """Every metric on the validation batches (aggregate = worst output), plus the per-output table."""
    metrics, per_output, _ = accuracy_within(problem, engine, None)
    return metrics, per_output


def accuracy_within(problem: Problem, engine: Engine, limit_ms: float | None,
                    clock: Clock = time.perf_counter) -> tuple[dict, dict, float | None]:
    """check_accuracy, ended after the first batch whose warm run takes longer than limit_ms: then the
    metrics are those of the batches run so far, and the third value is that run's ms (else None). A
    candidate that slow cannot win, and its check could take minutes: an int8 engine with f16 float parts
    ran 84 s per inference on MiniLM-L3, and its 4-batch check took 5.5 minutes of the study."""
    outputs, slow_ms = [], None
    for i, batch in enumerate(problem.batches):
        took = _ms(lambda: outputs.append(engine.run(batch)), clock)
        if limit_ms is not None and took > limit_ms:
            if i == 0:  # a first run may pay for lazy set-up: only a warm run counts
                took = _ms(lambda: engine.run(batch), clock)
            if took > limit_ms:
                slow_ms = took
                break
    refs = ensure_reference(problem)[:len(outputs)]
    metrics, per_output = compute_metrics(outputs, refs)
    for spec in problem.requirement.user_metrics():
        metrics[spec] = float(load_user_metric(spec)(outputs, refs, problem.batches[:len(outputs)]))
    return metrics, per_output, slow_ms


def _ms(call: Callable[[], object], clock: Clock) -> float:
    t0 = clock()
    call()
    return (clock() - t0) * 1e3


def _dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files)


RETIMES = 2  # --when-busy wait: a disturbed baseline window is timed again at most this often


def measure(problem: Problem, config: dict, out_dir: str, protocol: LatencyProtocol | None = None,
            on_phase: Phase = _no_phase, baseline: dict | None = None, when_busy: str = "warn",
            study: str = "", band: BaselineBand | None = None, give_up_above: float | None = None,
            wait_quiet: Callable[[Phase], object] = wait_until_quiet) -> TrialRecord:
    """Build the candidate into out_dir, check its accuracy, then time it holding its device's lock,
    so no two candidates are ever timed at once. With a baseline config, the baseline engine is built
    too and both are timed alternately (paired timing): the record then holds the candidate's latency
    relative to the baseline's in the same window. The record keeps the window and the machine's load.
    band: where the study's undisturbed baseline windows fall; a window outside it is timed again after
    a wait (when_busy "wait") and, still outside, marked disturbed. give_up_above: the ratio past which
    the candidate cannot win (paired timing stops there, measure/paired.py). wait_quiet: how "wait" waits
    for a quiet machine (a test passes its own: on a machine that is never quiet the real one waits 30 min)."""
    engine, backend, build_s = build(problem, config, out_dir, on_phase, study=study)
    base_engine, base_dir = None, None
    try:
        if baseline is not None:
            base_dir = tempfile.mkdtemp(prefix="tuner-baseline-")
            base_engine, _, _ = build(problem, baseline, base_dir, lambda p: on_phase(f"baseline {p}"), study=study)
        on_phase("accuracy check")
        limit_ms = base_ms = None
        if base_engine is not None and give_up_above:  # the slow-run limit of paired timing, on the check too
            base_engine.run(problem.batches[0])
            base_ms = _ms(lambda: base_engine.run(problem.batches[0]), time.perf_counter)
            limit_ms = SLOW_RUN * give_up_above * base_ms
        metrics, per_output, slow_ms = accuracy_within(problem, engine, limit_ms)
        if slow_ms is not None:  # one run each is all there is to say, as in paired timing's warm-up
            on_phase(f"a run took {slow_ms:.0f} ms, over {limit_ms:.0f} ms: it cannot win, not timed")
            with LoadMeter() as meter:
                latency, base_latency, relative = stopped_at(slow_ms, base_ms, "slow run")
            window_start = window_end = time.time()
            retimed = 0
        else:
            timed = _timed(problem, engine, base_engine, backend, protocol, on_phase, when_busy, band,
                           give_up_above, wait_quiet)
            latency, base_latency, relative, meter, (window_start, window_end), retimed = timed
    finally:
        engine.close()
        if base_engine is not None:
            base_engine.close()
        if base_dir is not None:
            shutil.rmtree(base_dir, ignore_errors=True)
    feasible = problem.requirement.holds(metrics)
    backend.measured(problem.model, BuildContext(out_dir, problem.shapes, cache_dir=cache.cache_dir(), study=study),
                     latency.median_ms, feasible)
    return TrialRecord(
        config=config, latency=latency.to_dict(), metrics=metrics, per_output=per_output,
        violations=problem.requirement.violations(metrics), feasible=feasible,
        build_s=build_s, engine_bytes=_dir_bytes(out_dir), backend=f"{backend.name}-{backend.versions()[backend.name]}",
        engine_dir=os.path.abspath(out_dir), timing_window=[window_start, window_end],
        timing="paired" if relative is not None else "alone", relative=relative.to_dict() if relative else None,
        baseline_latency=base_latency.to_dict() if base_latency else None, load=meter.load.to_dict(),
        baseline_guard=guard_record(band, base_latency.median_ms, retimed) if base_latency else None)


def _timed(problem: Problem, engine: Engine, base_engine: Engine | None, backend: Backend,
           protocol: LatencyProtocol | None, on_phase: Phase, when_busy: str, band: BaselineBand | None,
           give_up_above: float | None, wait_quiet: Callable[[Phase], object]) -> tuple:
    """measure()'s timing under the device's lock: (latency, baseline latency, relative, LoadMeter,
    (window start, end), times retimed)."""
    call = engine.timed_call(problem.batches[0])
    on_phase("waiting for the timing lock")
    with device_lock(default_lock_path(backend.device)):
        if when_busy == "wait":
            wait_quiet(on_phase)
        on_phase("timing")
        window_start = time.time()
        retimed = 0
        while True:
            with LoadMeter() as meter:
                if base_engine is not None:
                    latency, base_latency, relative = measure_paired(
                        call, base_engine.timed_call(problem.batches[0]), protocol, give_up_above=give_up_above)
                else:
                    latency, base_latency, relative = measure_latency(call, protocol), None, None
            if (base_latency is None or band is None or band.holds(base_latency.median_ms)
                    or when_busy != "wait" or retimed >= RETIMES):
                break
            retimed += 1
            on_phase(f"the baseline read {base_latency.median_ms:.1f} ms, above its band's {band.high_ms:.1f} ms: "
                     "timing again once the machine is quiet")
            wait_quiet(on_phase)
        return latency, base_latency, relative, meter, (window_start, time.time()), retimed


# ---------------------------------------------------------------- jobs: what runs in the isolated child

_LOADED: dict[str, Problem] = {}  # a persistent child keeps its problem (model, data, reference) loaded


def _problem(spec: dict, cache_dir: str) -> Problem:
    os.environ[cache.CACHE_ENV] = cache_dir  # the forkserver's environment may predate the caller's
    key = repr(sorted(spec.items()))
    if key not in _LOADED:
        _LOADED.clear()
        _LOADED[key] = ProblemSpec(**spec).load()
    return _LOADED[key]


def measure_job(spec: dict, cache_dir: str, config: dict, out_dir: str, protocol: dict | None,
                baseline: dict | None = None, when_busy: str = "warn", study: str = "",
                on_phase: Phase = _no_phase, band: dict | None = None, give_up_above: float | None = None) -> dict:
    on_phase("loading the model and reference")
    problem = _problem(spec, cache_dir)
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


def accuracy_job(spec: dict, cache_dir: str, config: dict, protocol: dict | None, on_phase: Phase = _no_phase,
                 study: str = "", baseline: dict | None = None) -> dict:
    """Error metrics of one build (sensitivity), and with a protocol its latency (untimed by others:
    a quick figure for the ranking, not a trial's measurement). With a baseline config too, that engine
    is built as well and the two are timed in turn (paired): "ratio" is the build's latency over the
    baseline's in the same window, "baseline_ms" the baseline's."""
    problem = _problem(spec, cache_dir)
    with _checked_engine(problem, config, on_phase, study) as (engine, backend, metrics, _):
        out: dict[str, Any] = {"metrics": metrics, "feasible": problem.requirement.holds(metrics)}
        if protocol and baseline is not None:
            with tempfile.TemporaryDirectory(prefix="tuner-job-base-") as work:
                base, _, _ = build(problem, baseline, work, lambda p: on_phase(f"baseline {p}"), study=study)
                try:
                    on_phase("timing")
                    with device_lock(default_lock_path(backend.device)):
                        cand, base_stats, rel = measure_paired(engine.timed_call(problem.batches[0]),
                                                               base.timed_call(problem.batches[0]),
                                                               LatencyProtocol(**protocol))
                finally:
                    base.close()
            out |= {"median_ms": cand.median_ms, "baseline_ms": base_stats.median_ms, "ratio": rel.ratio}
        elif protocol:
            on_phase("timing")
            with device_lock(default_lock_path(backend.device)):
                out["median_ms"] = measure_latency(engine.timed_call(problem.batches[0]),
                                                   LatencyProtocol(**protocol)).median_ms
    return out


def node_times_job(spec: dict, cache_dir: str, backend: str, on_phase: Phase = _no_phase,
                   study: str = "") -> dict[str, float]:
    """Each node's share of the fp32 run time, from the backend's profiler; {} where it has none."""
    problem = _problem(spec, cache_dir)
    on_phase("profiling")
    with tempfile.TemporaryDirectory(prefix="tuner-prof-") as work:
        return get_backend(backend).node_times(problem.model, problem.batches[:1], work)


def confirm_job(spec: dict, cache_dir: str, configs: list[dict], baseline: int, rounds: int,
                on_phase: Phase = _no_phase, study: str = "") -> dict:
    """Rebuild every config, check its accuracy again and time them all side by side in blocks with
    configs[baseline] (selection). A config that fails to build is reported with its reason; the
    others are still compared. Returns {"results": [per config], "load": the machine's load}."""
    problem = _problem(spec, cache_dir)
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
            on_phase("timing side by side")
            with device_lock(default_lock_path(sorted(devices)[0])), LoadMeter() as meter:
                samples, converged, _ = time_blocks([e.timed_call(problem.batches[0]) for e in engines],
                                                 LatencyProtocol(max_seconds=60.0), baseline=base_at, max_rounds=rounds)
        finally:
            for e in engines:
                e.close()
    for r, (stats, rel) in zip(built, relative_to(samples, base_at, converged)):
        r["latency"], r["relative"] = stats.to_dict(), rel.to_dict()
    return {"results": results, "load": meter.load.to_dict()}


def export_job(spec: dict, cache_dir: str, config: dict, out_dir: str, on_phase: Phase = _no_phase,
               study: str = "") -> dict:
    """Rebuild `config`, check its accuracy and save the engine into out_dir."""
    problem = _problem(spec, cache_dir)
    with _checked_engine(problem, config, on_phase, study) as (engine, backend, metrics, per_output):
        on_phase("saving")
        path = engine.save(out_dir)
    return {"metrics": metrics, "per_output": per_output, "engine": path, "backend": backend.name,
            "usage": backend.usage(out_dir)}


def verify_job(spec: dict, cache_dir: str, config: dict, baseline: dict, engine_dir: str | None, backend: str | None,
               protocol: dict | None, on_phase: Phase = _no_phase, study: str = "") -> dict:
    """The winner against the backend's defaults, in this fresh process, timed in paired blocks as a
    user checking the claim would: the exported engine loaded from engine_dir, or `config` rebuilt."""
    problem = _problem(spec, cache_dir)
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
            on_phase("timing")
            with device_lock(default_lock_path(used.device)), LoadMeter() as meter:
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
        self._runner = IsolatedRunner(persistent)

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

    def confirm(self, configs: list[dict], baseline: int, rounds: int = 30) -> dict:
        return self._call(confirm_job, configs=configs, baseline=baseline, rounds=rounds)

    def verify(self, config: dict, baseline: dict, engine_dir: str | None = None, backend: str | None = None,
               protocol: LatencyProtocol | None = None) -> dict:
        return self._call(verify_job, config=config, baseline=baseline, engine_dir=engine_dir, backend=backend,
                          protocol=asdict(protocol) if protocol else None)

    def export(self, config: dict, out_dir: str) -> dict:
        return self._call(export_job, config=config, out_dir=out_dir)

    def close(self) -> None:
        self._runner.close()

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
