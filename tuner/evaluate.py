"""Build one candidate engine and measure its latency and accuracy against the cached reference."""
from __future__ import annotations

import os
import pickle
import time
from dataclasses import dataclass, field
from typing import Any, Callable


from . import data as data_mod
from .backends import onnxruntime as ortb
from .measure.accuracy import Requirement, compute_metrics, load_user_metric
from .lock import device_lock
from .measure.latency import LatencyProtocol, measure_latency
from .model import input_specs, load_model, model_hash, parse_shape_profile, resolve_shapes
from .routes import apply_precision
from .space import Space, config_key, defaults_chooser, load_space, normalize, parse_set

CACHE_DIR = os.environ.get("TUNER_CACHE", ".tuner-cache")


@dataclass
class ProblemSpec:
    """What defines a problem, as given by the user: JSON-able, stored in a study, sent to child processes."""

    model_path: str
    space_path: str | None = None
    data: str | None = None
    calib_data: str | None = None
    shapes: list[str] | None = None
    int_ranges: list[str] | None = None
    require: str | None = None
    n_batches: int = 4
    n_calib: int = 4

    def load(self) -> "Problem":
        return load_problem(self.model_path, self.space_path, self.data, self.calib_data, self.shapes,
                            self.int_ranges, self.require, self.n_batches, self.n_calib)


@dataclass
class Problem:
    """Everything fixed across trials: model, data, reference outputs, requirement, space."""

    model_path: str
    model: Any
    model_hash: str
    space: Space
    batches: list
    calib: list
    data_hash: str
    requirement: Requirement
    graph_nodes: list = field(default_factory=list)
    refs: list = field(default_factory=list)

    @property
    def calib_key(self) -> str:
        """Names the cached calibration ranges. The model is part of it: two models fed the same
        inputs (ResNet-18 and MobileNetV3 at 1x3x224x224) have different tensors to range."""
        return f"{self.model_hash}-{self.data_hash}"


def load_problem(model_path: str, space_path: str | None = None, data: str | None = None, calib_data: str | None = None,
                 shapes: list[str] | None = None, int_ranges: list[str] | None = None, require: Any = None,
                 n_batches: int = 4, n_calib: int = 4) -> Problem:
    requirement = Requirement.parse(require)
    space = load_space(space_path)
    model = load_model(model_path)
    specs = input_specs(model)
    profile = parse_shape_profile(shapes)
    if data:
        batches = data_mod.load_npz_batches(data, specs)
    else:
        batches = data_mod.synthetic_batches(specs, resolve_shapes(specs, profile), n_batches, data_mod.parse_int_ranges(int_ranges))
    calib = data_mod.load_npz_batches(calib_data, specs) if calib_data else batches[:n_calib]
    problem = Problem(model_path, model, model_hash(model_path), space, batches, calib,
                      data_mod.batches_hash(batches) + data_mod.batches_hash(calib)[:8], requirement,
                      [(n.name, n.op_type) for n in model.graph.node])
    problem.refs = reference_outputs(problem)
    return problem


def reference_outputs(problem: Problem) -> list:
    """fp32 outputs with all optimizations off, cached on disk by model hash + data hash."""
    os.makedirs(CACHE_DIR, exist_ok=True)
    path = os.path.join(CACHE_DIR, f"ref-{problem.model_hash}-{problem.data_hash}.pkl")
    if os.path.isfile(path):
        with open(path, "rb") as f:
            return pickle.load(f)
    refs = ortb.run_batches(ortb.reference_session(problem.model_path), problem.batches)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        pickle.dump(refs, f)
    os.replace(tmp, path)
    return refs


def config_from_sets(problem: Problem, sets: list[str] | None) -> dict:
    return normalize(problem.space, defaults_chooser(parse_set(sets, problem.space)), problem.graph_nodes)


@dataclass
class Candidate:
    """A built engine, loaded and ready to run."""

    session: Any
    model_path: str
    settings: dict
    build_s: float


def _no_phase(name: str) -> None:
    pass


def build_candidate(problem: Problem, config: dict, out_dir: str, on_phase: Callable[[str], None] = _no_phase,
                    interleaved: bool = False) -> Candidate:
    """Apply the graph transformations, write the engine artifact into out_dir and load it
    (interleaved: for timing alongside other live sessions, see make_session)."""
    os.makedirs(out_dir, exist_ok=True)
    t0 = time.perf_counter()
    route = config.get("precision", "fp32")
    on_phase("calibration" if route == "int8-static" else f"build ({route})")
    model_path = apply_precision(problem.model, config, out_dir, problem.calib, CACHE_DIR, problem.calib_key)
    settings = ortb.session_settings(config)
    on_phase("session creation")
    session = ortb.make_session(model_path, settings, interleaved)
    build_s = time.perf_counter() - t0
    ortb.write_engine(out_dir, model_path, settings)
    src = os.path.join(out_dir, "input.onnx")
    if os.path.exists(src):
        os.remove(src)
    return Candidate(session, model_path, settings, build_s)


def check_accuracy(problem: Problem, session) -> tuple[dict, dict]:
    """Every metric on the validation batches (aggregate = worst output), plus the per-output table."""
    outputs = ortb.run_batches(session, problem.batches)
    metrics, per_output = compute_metrics(outputs, problem.refs)
    for spec in problem.requirement.user_metrics():
        metrics[spec] = float(load_user_metric(spec)(outputs, problem.refs, problem.batches))
    return metrics, per_output


def evaluate_config(problem: Problem, config: dict, out_dir: str, protocol: LatencyProtocol | None = None,
                    on_phase: Callable[[str], None] = _no_phase, lock_path: str | None = None) -> dict:
    """Build the candidate into out_dir, then measure. Returns a JSON-able record.

    Timing holds the device lock (when lock_path is given), so no two candidates are timed at once;
    the record keeps the wall-clock window of the timing.
    """
    cand = build_candidate(problem, config, out_dir, on_phase)
    on_phase("accuracy check")
    metrics, per_output = check_accuracy(problem, cand.session)
    feed = ortb.adapt_feed(cand.session, problem.batches[0])
    on_phase("waiting for the timing lock")
    with device_lock(lock_path):
        on_phase("timing")
        window_start = time.time()
        latency = measure_latency(lambda: cand.session.run(None, feed), protocol)
        window_end = time.time()
    size = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
    return {
        "config": config,
        "key": config_key(config),
        "latency": latency.to_dict(),
        "metrics": metrics,
        "per_output": per_output,
        "violations": problem.requirement.violations(metrics),
        "feasible": problem.requirement.holds(metrics),
        "build_s": cand.build_s,
        "engine_bytes": size,
        "engine_dir": os.path.abspath(out_dir),
        "backend": ortb.backend_version(),
        "timing_window": [window_start, window_end],
    }


def evaluate_spec(spec: dict, cache_dir: str, config: dict, out_dir: str, protocol: dict | None,
                  lock_path: str | None, on_phase: Callable[[str], None] = _no_phase) -> dict:
    """evaluate_config from plain arguments: the entry point of a trial's child process."""
    global CACHE_DIR
    CACHE_DIR = cache_dir
    on_phase("loading the model and reference")
    problem = ProblemSpec(**spec).load()
    return evaluate_config(problem, config, out_dir, LatencyProtocol(**protocol) if protocol else None, on_phase, lock_path)
