"""Build a candidate through its backend and measure it: accuracy against the fp32 reference, then
latency under the device's timing lock. Backend-neutral.

The jobs at the bottom are what runs in an isolated child (tuner.execute.isolate); Evaluator is the parent's
handle on them. Trials, sensitivity analysis, selection and export all build through it, so a crash
in a backend (a segfault in calibration, an OOM kill) fails one job and never the tuning process.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable

from ..backends.base import Backend, BuildContext, Engine, engine_precision, get_backend
from ..inputs.ref_outputs import check_against_engine
from ..inputs.user_paths import dir_bytes
from ..measure.accuracy import compute_metrics, load_user_metric
from ..measure.guard import BaselineBand, guard_record
from ..measure.latency import LatencyProtocol, measure_latency, sample_ms
from ..measure.load import LoadMeter, wait_until_quiet
from ..measure.paired import SLOW_RUN, Clock, measure_paired, stopped_at
from ..problem.reference import reference_outputs
from ..problem.spec import Problem
from ..search.record import TrialRecord
from ..store import cache
from ..store.locks import WAITING_FOR_LOCK, timing_lock

Phase = Callable[[str], None]


def no_phase(name: str) -> None:
    pass


def backend_of(problem: Problem, config: dict) -> Backend:
    """The backend that builds `config`: its `backend` choice in a space over several, else the space's."""
    return get_backend(problem.backend_name(config))


def ensure_reference(problem: Problem) -> list:
    if problem.refs is None:
        problem.refs = reference_outputs(problem.model_path, problem.model_hash, problem.data_hash, problem.batches)
    return problem.refs


def build(problem: Problem, config: dict, workdir: str, on_phase: Phase = no_phase,
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
        took = sample_ms(lambda batch=batch: outputs.append(engine.run(batch)), clock)
        if limit_ms is not None and took > limit_ms:
            if i == 0:  # a first run may pay for lazy set-up: only a warm run counts
                took = sample_ms(lambda batch=batch: engine.run(batch), clock)
            if took > limit_ms:
                slow_ms = took
                break
    refs = ensure_reference(problem)[:len(outputs)]
    if problem.spec.ref_outputs and outputs:
        check_against_engine(outputs[0], refs[0], problem.spec.ref_outputs)
    metrics, per_output = compute_metrics(outputs, refs)
    for spec in problem.requirement.user_metrics():
        metrics[spec] = float(load_user_metric(spec)(outputs, refs, problem.batches[:len(outputs)]))
    return metrics, per_output, slow_ms


RETIMES = 2  # --when-busy wait: a disturbed baseline window is timed again at most this often


def measure(problem: Problem, config: dict, out_dir: str, protocol: LatencyProtocol | None = None,
            on_phase: Phase = no_phase, baseline: dict | None = None, when_busy: str = "warn",
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
            base_ms = sample_ms(lambda: base_engine.run(problem.batches[0]))
            limit_ms = SLOW_RUN * give_up_above * base_ms
        with LoadMeter() as check_meter:  # the load while the slow run was timed, should it be one
            metrics, per_output, slow_ms = accuracy_within(problem, engine, limit_ms)
        if slow_ms is not None:  # one run each is all there is to say, as in paired timing's warm-up
            on_phase(f"a run took {slow_ms:.0f} ms, over {limit_ms:.0f} ms: it cannot win, not timed")
            latency, base_latency, relative = stopped_at(slow_ms, base_ms, "slow run")
            meter, window, retimed = check_meter, None, 0  # no window: nothing was timed under the lock
        else:
            timed = _timed(problem, engine, base_engine, backend, protocol, on_phase, when_busy, band,
                           give_up_above, wait_quiet, study)
            latency, base_latency, relative, meter, window, retimed = timed
        precision = engine_precision(engine)  # asked after the timing: a runtime's answer may cost a little
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
        build_s=build_s, engine_bytes=dir_bytes(out_dir), backend=f"{backend.name}-{backend.versions()[backend.name]}",
        engine_dir=os.path.abspath(out_dir), timing_window=list(window) if window else None,
        timing="paired" if relative is not None else "alone", relative=relative.to_dict() if relative else None,
        baseline_latency=base_latency.to_dict() if base_latency else None, load=meter.load.to_dict(),
        baseline_guard=guard_record(band, base_latency.median_ms, retimed) if base_latency else None,
        precision=precision or None)


def _timed(problem: Problem, engine: Engine, base_engine: Engine | None, backend: Backend,
           protocol: LatencyProtocol | None, on_phase: Phase, when_busy: str, band: BaselineBand | None,
           give_up_above: float | None, wait_quiet: Callable[[Phase], object], study: str = "") -> tuple:
    """measure()'s timing under the device's lock: (latency, baseline latency, relative, LoadMeter,
    (window start, end), times retimed)."""
    call = engine.timed_call(problem.batches[0])
    on_phase(WAITING_FOR_LOCK)
    with timing_lock(backend.device, on_phase, study, "a trial"):
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
