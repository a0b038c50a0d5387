"""Build a candidate through its backend and check it: accuracy against the fp32 reference, what it computes
in, and the engine saved where a process of its own loads it to be timed (tuner.execute.timing).
Backend-neutral; runs in an isolated child (tuner.execute.jobs), so a crash in a backend (a segfault in
calibration, an OOM kill) fails one job and never the tuning process.
"""
from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..backends.base import Backend, BuildContext, Engine, engine_precision, get_backend
from ..errors import JobPhase
from ..inputs.ref_outputs import check_against_engine
from ..inputs.user_paths import dir_bytes
from ..measure.accuracy import compute_metrics, load_user_metric
from ..measure.latency import sample_ms
from ..measure.load import LoadMeter
from ..measure.paired import Clock
from ..problem.reference import reference_outputs
from ..problem.spec import Problem
from ..store import cache

Phase = Callable[[str], None]


def no_phase(name: str) -> None:
    pass


def backend_of(problem: Problem, config: dict) -> Backend:
    """The backend that builds `config`: its `backend` choice in a space over several, else the space's."""
    return get_backend(problem.backend_name(config))


def ensure_reference(problem: Problem, case: int = 0) -> list:
    """The reference outputs of the workload's set `case` (the first: the problem's batches)."""
    got = problem.cases[case]
    if got.refs is None:
        key = problem.data_hash if case == 0 else f"{problem.data_hash}-s{case}"
        got.refs = reference_outputs(problem.model_path, problem.model_hash, key, got.batches)
    return got.refs


def build_context(problem: Problem, workdir: str, on_phase: Phase = no_phase, study: str = "",
                  side_by_side: bool = False) -> BuildContext:
    """What a build of this problem may use, its artifacts going into workdir (created here)."""
    os.makedirs(workdir, exist_ok=True)
    return BuildContext(workdir, problem.shapes, problem.calib, problem.calib_key, cache.cache_dir(), on_phase,
                        side_by_side, study, workload_shapes(problem))


def workload_shapes(problem: Problem) -> list[dict[str, tuple[int, ...]]]:
    """BuildContext.workload: every set's shapes where the workload has several, else []."""
    return [c.shapes for c in problem.cases] if problem.several_shapes else []


def build(problem: Problem, config: dict, workdir: str, on_phase: Phase = no_phase,
          side_by_side: bool = False, study: str = "") -> tuple[Engine, Backend, float]:
    """Build and load the engine of `config` into workdir; returns (engine, its backend, build seconds).
    study: the study whose trials share the backend's compile caches ("" outside a study)."""
    backend = backend_of(problem, config)
    ctx = build_context(problem, workdir, on_phase, study, side_by_side)
    t0 = time.perf_counter()
    engine = backend.build(problem.model, config, ctx)
    return engine, backend, time.perf_counter() - t0


def check_accuracy(problem: Problem, engine: Engine) -> tuple[dict, dict]:
    """Every metric on the validation batches (aggregate = worst output, and worst set of shapes), plus the
    per-output table."""
    got = accuracy_within(problem, engine, None)
    return got.metrics, got.per_output


@dataclass
class Accuracy:
    """An accuracy check's answer. metrics: each metric's worst over the outputs and over the workload's sets of
    shapes (the requirement must hold at every one); per_output likewise; slow_ms: the warm run that ended the
    check (accuracy_within), else None; per_case: each set's metrics where the workload has several."""

    metrics: dict
    per_output: dict
    slow_ms: float | None = None
    per_case: list[dict] = field(default_factory=list)


def accuracy_within(problem: Problem, engine: Engine, limit_ms: float | None,
                    clock: Clock = time.perf_counter) -> Accuracy:
    """check_accuracy, ended after the first batch whose run takes longer than limit_ms twice (a first run and
    a run that lost its core are taken again): then the metrics are those of the batches run so far, and slow_ms
    the faster of the two runs' ms. A candidate that slow cannot win,
    and its check could take minutes: an int8 engine with f16 float parts ran 84 s per inference on
    MiniLM-L3, and its 4-batch check took 5.5 minutes of the study. The limit is the first set's (the
    baseline's run it is made of is at that set's shapes); a slow run there ends the whole check."""
    per_case, tables, slow_ms = [], [], None
    for i, case in enumerate(problem.cases):
        try:
            outputs, slow_ms = _run_batches(engine, case.batches, limit_ms if i == 0 else None, clock)
        except Exception as exc:
            if not problem.several_shapes:
                raise
            # which set of the workload it cannot run is the news (the trial's fail reason says it)
            raise RuntimeError(f"at {case.label}: {type(exc).__name__}: {exc}") from exc
        refs = ensure_reference(problem, i)[:len(outputs)]
        if problem.spec.ref_outputs and outputs:
            check_against_engine(outputs[0], refs[0], problem.spec.ref_outputs)
        metrics, per_output = compute_metrics(outputs, refs)
        for spec in problem.requirement.user_metrics():
            metrics[spec] = float(load_user_metric(spec)(outputs, refs, case.batches[:len(outputs)]))
        per_case.append(metrics)
        tables.append(per_output)
        if slow_ms is not None:
            break
    per_output = {o: _worst([t[o] for t in tables]) for o in tables[0]}
    return Accuracy(_worst(per_case), per_output, slow_ms, per_case if problem.several_shapes else [])


def _run_batches(engine: Engine, batches: list, limit_ms: float | None, clock: Clock) -> tuple[list, float | None]:
    outputs, slow_ms = [], None
    for batch in batches:
        took = sample_ms(lambda batch=batch: outputs.append(engine.run(batch)), clock)
        if limit_ms is not None and took > limit_ms:
            # a first run may pay for lazy set-up, and any run can lose its core on a busy machine (CI under a
            # burner lost a candidate to one such run): a run over the limit is taken again, the faster counts
            took = min(took, sample_ms(lambda batch=batch: engine.run(batch), clock))
            if took > limit_ms:
                slow_ms = took
                break
    return outputs, slow_ms


def _worst(tables: list[dict]) -> dict:
    """Each metric's worst (highest: every metric is an error) over the tables; NaN counts as the worst."""
    return {k: max((t[k] for t in tables if k in t), key=lambda v: float("inf") if v != v else v)
            for k in dict.fromkeys(k for t in tables for k in t)}


@dataclass
class Built:
    """A candidate built, checked and saved in the child that built it: what its timing, in a process of its
    own, and its trial record need. slow_ms: a warm run over the check's limit ended the check there (the
    candidate cannot win; it is not timed)."""

    config: dict
    engine_dir: str  # the saved engine (Engine.save), loaded by the process that times it
    backend: str  # the backend's name: the timing process imports this one alone
    label: str  # backend and library version, as records name it ("onnxruntime-1.32.0")
    device: str  # the timing lock's key
    build_s: float
    metrics: dict = field(default_factory=dict)
    per_output: dict = field(default_factory=dict)
    violations: dict = field(default_factory=dict)  # per requirement bound: value - limit
    feasible: bool = False
    slow_ms: float | None = None
    check_load: dict | None = None  # Load.to_dict() while a slow run was timed
    precision: dict = field(default_factory=dict)
    per_case: list[dict] = field(default_factory=list)  # each set's metrics where the workload has several
    engine_bytes: int = 0
    main: str = ""  # the saved engine's main file, in engine_dir (Engine.save's answer)
    # the backend wants to hear the timing (Backend.measured is overridden: TensorRT's timing cache)
    hears_timing: bool = False


def build_checked(problem: Problem, config: dict, out_dir: str, limit_ms: float | None = None,
                  on_phase: Phase = no_phase, study: str = "", check: bool = True) -> Built:
    """Build `config` into out_dir, check its accuracy (ended early past limit_ms: accuracy_within), ask what
    it computes in, and save it there for its timing process. check=False: built and saved only (a
    baseline, whose accuracy is the reference's)."""
    engine, backend, build_s = build(problem, config, out_dir, on_phase, study=study)
    built = Built(config, os.path.abspath(out_dir), backend.name, f"{backend.name}-{backend.versions()[backend.name]}",
                  backend.device, build_s, hears_timing=type(backend).measured is not Backend.measured)
    try:
        if check:
            on_phase(JobPhase.ACCURACY_CHECK)
            with LoadMeter() as meter:  # the load while a slow run was timed, should it be one
                got = accuracy_within(problem, engine, limit_ms)
            built.metrics, built.per_output, built.slow_ms, built.per_case = (got.metrics, got.per_output, got.slow_ms,
                                                                              got.per_case)
            built.violations = problem.requirement.violations(built.metrics)
            built.feasible = problem.requirement.holds(built.metrics)
            built.check_load = meter.load.to_dict()
            built.precision = engine_precision(engine)
        on_phase(JobPhase.SAVING)
        built.main = os.path.relpath(engine.save(out_dir), out_dir)
    finally:
        engine.close()
    built.engine_bytes = dir_bytes(out_dir)
    return built


def tell_backend(problem: Problem, built: Built, median_ms: float, feasible: bool, study: str = "") -> None:
    """Backend.measured after the timing (TensorRT keeps the fastest feasible engine's tactics)."""
    backend_of(problem, built.config).measured(
        problem.model, BuildContext(built.engine_dir, problem.shapes, cache_dir=cache.cache_dir(), study=study,
                                    workload=workload_shapes(problem)),
        median_ms, feasible)


def activation_errors(problem: Problem, float_config: dict, quantized_config: dict, tensors: list[str],
                      on_phase: Phase = no_phase, study: str = "") -> dict[str, float] | None:
    """Each of `tensors` (ONNX tensor names) in the quantized engine's run against the float engine's, over the
    validation batches: relative L2 error, ||q - f|| / ||f||. One run of each, the way ONNX Runtime's
    qdq_loss_debug compares activations. None where the backend cannot give activations; a tensor either
    run lacks is left out."""
    backend = backend_of(problem, quantized_config)
    runs = []
    for name, config in (("float", float_config), ("quantized", quantized_config)):
        with tempfile.TemporaryDirectory(prefix=f"tuner-activations-{name}-") as work:
            on_phase(f"activations of the {name} engine")
            got = backend.activations(problem.model, config, tensors, problem.batches, build_context(problem, work, on_phase,
                                                                                                  study))
        if got is None:
            return None
        runs.append(got)
    out = {}
    for t in tensors:
        pairs = [(f[t], q[t]) for f, q in zip(*runs) if t in f and t in q and f[t].shape == q[t].shape]
        if pairs:
            diff = sum(float(np.sum((q.astype(np.float64) - f) ** 2)) for f, q in pairs)
            norm = sum(float(np.sum(f.astype(np.float64) ** 2)) for f, _ in pairs)
            out[t] = float(np.sqrt(diff / norm)) if norm > 0 else float(np.sqrt(diff) > 0)
    return out
