"""Tuning studies: create or resume an Optuna study, the objective (one isolated build per trial),
the baseline trial, reuse of configs already measured, and the stop rules."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field

import optuna
from optuna.trial import TrialState

from . import __version__
from .errors import UserError
from . import evaluate
from .evaluate import Problem, ProblemSpec, evaluate_spec
from .isolate import TrialFailure, run_isolated
from .lock import default_lock_path
from .machine import fingerprint, same_machine
from .measure.accuracy import Requirement
from .measure.latency import LatencyProtocol
from .model import model_hash
from .space import DEFAULT_SPACE, defaults_chooser, grid_values, normalize, parse_set, trial_chooser, trial_params
from .storage import default_url, local_path, open_storage

SETTINGS_ATTR = "tuner_settings"
OBJECTIVES = {"latency,error": ("latency", "error"), "latency": ("latency",)}
SAMPLERS = ("tpe", "nsga2", "gp", "random", "grid")
SPEC_FIELDS = ("space_path", "data", "calib_data", "shapes", "int_ranges", "require")


@dataclass
class TuneOptions:
    """Everything `tuner tune` takes. None means "not given": on resume, the stored setting holds."""

    study: str
    model: str | None = None
    storage: str | None = None
    space: str | None = None
    data: str | None = None
    calib_data: str | None = None
    shapes: list[str] | None = None
    int_ranges: list[str] | None = None
    require: str | list[str] | None = None
    objectives: str | None = None
    sampler: str | None = None
    seed: int | None = None
    n_trials: int | None = None
    max_trials: int | None = None  # study-wide budget over all workers, stored in the study (tuner.cluster)
    timeout: float | None = None
    enqueue: list[str] = field(default_factory=list)
    force: bool = False
    trial_timeout: float = 600.0
    jobs: int = 1
    stop_after_no_improvement: int | None = None
    top_k: int = 3
    select: bool = True
    quiet: bool = False
    progress: bool = True
    keep_engines: bool = False
    engines_dir: str | None = None
    protocol: LatencyProtocol | None = None

    @property
    def storage_url(self) -> str:
        return self.storage or default_url(self.study)


def _file_hash(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def _abs(path: str | None) -> str | None:
    return os.path.abspath(path) if path else None


def _requirement_text(require) -> str:
    return str(Requirement.parse(require))


def _given_settings(opts: TuneOptions) -> dict:
    """The settings the user gave on this call, in stored form."""
    given: dict = {}
    if opts.model:
        if not os.path.isfile(opts.model):
            raise UserError(f"{opts.model}: no such model file")
        given["model_path"] = _abs(opts.model)
        given["model_hash"] = model_hash(opts.model)
    if opts.space:
        given["space_path"] = _abs(opts.space)
    for name, value in (("data", _abs(opts.data)), ("calib_data", _abs(opts.calib_data)), ("shapes", opts.shapes),
                        ("int_ranges", opts.int_ranges)):
        if value:
            given[name] = value
    if opts.require:
        given["require"] = _requirement_text(opts.require)
    if opts.objectives:
        if opts.objectives not in OBJECTIVES:
            raise UserError(f"--objectives {opts.objectives}: use one of {', '.join(OBJECTIVES)}")
        given["objectives"] = opts.objectives
    if opts.sampler:
        if opts.sampler not in SAMPLERS:
            raise UserError(f"--sampler {opts.sampler}: use one of {', '.join(SAMPLERS)}")
        given["sampler"] = opts.sampler
    if opts.seed is not None:
        given["seed"] = opts.seed
    return given


def new_settings(given: dict) -> dict:
    if "model_path" not in given:
        raise UserError("a new study needs the model: tuner tune MODEL.onnx --study NAME")
    settings = {"space_path": DEFAULT_SPACE, "data": None, "calib_data": None, "shapes": None, "int_ranges": None,
                "require": "", "objectives": "latency,error", "sampler": "tpe", "seed": None}
    settings.update(given)
    settings["space_hash"] = _file_hash(settings["space_path"]) if os.path.isfile(settings["space_path"]) else None
    settings.update({"backend": "onnxruntime", "created_with": __version__, "created_at": time.time(),
                     "machine": fingerprint()})
    return settings


def merge_settings(study_name: str, stored: dict, given: dict, force: bool) -> dict:
    """Resume with the stored settings; a given setting that differs is refused unless force."""
    if "model_hash" in given and given["model_hash"] == stored["model_hash"]:
        given = {k: v for k, v in given.items() if k not in ("model_path", "model_hash")}  # same model, moved
    diffs = [k for k, v in given.items() if stored.get(k) != v]
    if diffs and not force:
        k = diffs[0]
        raise UserError(f"study {study_name!r} was created with {k}={stored.get(k)!r}, not {given[k]!r}; "
                        "use another --study name, or --force to change the study's settings")
    merged = dict(stored)
    merged.update(given)
    if "space_path" in given:
        merged["space_hash"] = _file_hash(given["space_path"])
    return merged


def problem_spec(settings: dict) -> ProblemSpec:
    return ProblemSpec(settings["model_path"], **{k: settings.get(k) for k in SPEC_FIELDS})


def check_inputs(study_name: str, settings: dict) -> None:
    """The files the study was made for are still the same files."""
    for path_key, hash_key, fn in (("model_path", "model_hash", model_hash), ("space_path", "space_hash", _file_hash)):
        path = settings[path_key]
        if not os.path.isfile(path):
            raise UserError(f"study {study_name!r}: {path} is missing; pass the file again (tuner tune FILE --study {study_name})")
        if settings.get(hash_key) and fn(path) != settings[hash_key]:
            raise UserError(f"study {study_name!r}: {path} changed since the study began ({hash_key} differs); "
                            "use a new --study name, or --force to continue with the new file")


def make_sampler(settings: dict, problem: Problem, worker: int = 0) -> optuna.samplers.BaseSampler:
    """worker: parallel workers get seed + worker, else they would all propose the same first configs."""
    name, seed = settings["sampler"], settings.get("seed")
    if seed is not None:
        seed += worker
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    if name == "tpe":
        # multivariate=None means False for several objectives (slow and blind to interactions);
        # group=True models the conditional sub-spaces of each precision route separately.
        return optuna.samplers.TPESampler(multivariate=True, group=True, seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        try:
            import torch  # noqa: F401  (GPSampler needs it)
        except ImportError:
            raise UserError("--sampler gp needs PyTorch: pip install torch") from None
        return optuna.samplers.GPSampler(seed=seed)
    return optuna.samplers.GridSampler(grid_space(problem), seed=seed)


def grid_space(problem: Problem) -> dict[str, list]:
    """The coarse grid: every session and route parameter; per-layer overrides stay at their default."""
    return {p.name: grid_values(p) for p in problem.space.params}


@dataclass
class StudyContext:
    """A study opened for tuning, with the problem it tunes."""

    study: optuna.Study
    settings: dict
    problem: Problem
    url: str

    @property
    def objectives(self) -> tuple[str, ...]:
        return OBJECTIVES[self.settings["objectives"]]


def _load_existing(name: str, storage) -> optuna.Study | None:
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return None


def open_study(opts: TuneOptions, heartbeat: bool = False) -> StudyContext:
    """Create the study, or resume it with its stored settings (checking what the user gave again).
    Bad input leaves nothing behind: a database file this call created is removed again."""
    path = local_path(opts.storage_url)
    fresh = path is not None and not os.path.exists(path)
    try:
        return _open_study(opts, heartbeat)
    except UserError:
        if fresh:
            for leftover in (path, f"{path}-wal", f"{path}-shm"):
                with contextlib.suppress(OSError):
                    os.remove(leftover)
        raise


def _open_study(opts: TuneOptions, heartbeat: bool) -> StudyContext:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    given = _given_settings(opts)
    storage = open_storage(opts.storage_url, heartbeat=heartbeat)
    study = _load_existing(opts.study, storage)
    stored = study.user_attrs.get(SETTINGS_ATTR) if study else None
    settings = merge_settings(opts.study, stored, given, opts.force) if stored else new_settings(given)
    if stored and not opts.force:
        check_inputs(opts.study, settings)
    problem = problem_spec(settings).load()  # validates model, data, space and requirement before any write
    if stored and stored.get("data_hash") not in (None, problem.data_hash) and not opts.force:
        raise UserError(f"study {opts.study!r}: the validation data differ from the study's (data hash); "
                        "give the same --data/--shape, or --force")
    settings["data_hash"] = problem.data_hash
    settings["spec"] = asdict(problem_spec(settings))
    settings["encoding"] = {o.name: o.encoding for o in problem.space.overrides}
    if settings.get("rankings_for") != [settings.get("space_hash"), problem.data_hash]:  # once per space and data
        settings["rankings"] = sensitivity_rankings(problem, opts.quiet)
        settings["rankings_for"] = [settings.get("space_hash"), problem.data_hash]
    if study is None:
        directions = ["minimize"] * len(OBJECTIVES[settings["objectives"]])
        study = optuna.create_study(study_name=opts.study, storage=storage, directions=directions,
                                    sampler=make_sampler(settings, problem))
    else:
        if len(study.directions) != len(OBJECTIVES[settings["objectives"]]):
            raise UserError(f"study {opts.study!r} has {len(study.directions)} objective(s); --objectives cannot change that")
        # The sampler's state is not stored: make it again from the stored settings.
        study.sampler = make_sampler(settings, problem)
    settings["sampler_options"] = _sampler_options(study.sampler)
    study.set_user_attr(SETTINGS_ATTR, settings)
    return StudyContext(study, settings, problem, opts.storage_url)


def sensitivity_rankings(problem: Problem, quiet: bool = True) -> dict[str, dict]:
    """For each override with the sensitivity encoding: its ranking, from the (cached) sensitivity
    table and the greedy pass over it (tuner.sensitivity). Computed once per study, stored in it."""
    from .sensitivity import ranking_for_study

    out = {}
    for o in problem.space.overrides:
        if o.encoding != "sensitivity":
            continue
        progress = (lambda msg: None) if quiet else (lambda msg: print(f"\r{msg:70s}", end="", file=sys.stderr, flush=True))
        out[o.name] = ranking_for_study(problem, {"precision": o.sensitivity_route}, o, progress)
        if not quiet:
            r = out[o.name]
            print(f"\rsensitivity of {o.sensitivity_route}: greedy float set {r['order'][:r['cut']]} "
                  f"({r['greedy_builds']} builds)", file=sys.stderr)
    return out


def attach_study(url: str, name: str, worker: int = 0) -> StudyContext:
    """Join an existing study with its stored settings (a parallel worker): nothing is written."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = _load_existing(name, open_storage(url))
    if study is None or SETTINGS_ATTR not in study.user_attrs:
        raise UserError(f"no tuning study {name!r} in {url}; create it with tuner tune MODEL.onnx --study {name}")
    settings = study.user_attrs[SETTINGS_ATTR]
    check_inputs(name, settings)
    problem = problem_spec(settings).load()
    if settings.get("data_hash") not in (None, problem.data_hash):
        raise UserError(f"study {name!r}: the validation data differ from the study's (data hash)")
    study.sampler = make_sampler(settings, problem, worker)
    return StudyContext(study, settings, problem, url)


def _sampler_options(sampler) -> dict:
    opts = {"class": type(sampler).__name__}
    for k in ("_multivariate", "_group", "_n_startup_trials", "_constant_liar", "_population_size"):
        if hasattr(sampler, k):
            opts[k.lstrip("_")] = getattr(sampler, k)
    return opts


# ---------------------------------------------------------------- baseline and enqueued configs


def enqueue_initial(ctx: StudyContext, extra: list[str]) -> None:
    """Trial 0 is the backend's default configuration (once per study); then any --enqueue configs."""
    study, problem = ctx.study, ctx.problem
    grid = ctx.settings["sampler"] == "grid"
    rankings = ctx.settings.get("rankings")
    if not study.user_attrs.get("baseline_enqueued"):
        study.enqueue_trial(_params_for(problem, {}, grid, rankings), user_attrs={"baseline": True})
        study.set_user_attr("baseline_enqueued", True)
    # The greedy pass's proposal: its route with the greedy float set (top_k = the cut).
    for name, r in (rankings or {}).items():
        if r["greedy_feasible"] and not study.user_attrs.get(f"greedy_enqueued/{r['table_key']}"):
            values = {"precision": r["route"]["precision"], f"{name}/top_k": r["cut"]}
            study.enqueue_trial(_params_for(problem, values, grid, rankings), user_attrs={"enqueued": "greedy"})
            study.set_user_attr(f"greedy_enqueued/{r['table_key']}", True)
    for item in extra:
        sets = [s for s in item.split(",") if s.strip()]
        study.enqueue_trial(_params_for(problem, parse_set(sets, problem.space), grid, rankings),
                            user_attrs={"enqueued": item}, skip_if_exists=True)


def _params_for(problem: Problem, values: dict, grid: bool, rankings: dict | None = None) -> dict:
    if grid:  # GridSampler needs every grid parameter fixed, active or not
        return {p.name: values.get(p.name, p.default) for p in problem.space.params}
    return trial_params(problem.space, defaults_chooser(values), problem.graph_nodes, rankings)


# ---------------------------------------------------------------- the objective


def build_key(settings: dict, config: dict) -> str:
    """Everything a build depends on: model, data, config, backend and library versions."""
    payload = {"model": settings["model_hash"], "data": settings["data_hash"], "config": config,
               "versions": settings["machine"]["versions"], "backend": settings["backend"]}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:20]


def engines_dir(opts: TuneOptions) -> str:
    if opts.engines_dir:
        return opts.engines_dir
    path = local_path(opts.storage_url)
    base = os.path.dirname(path) if path else "tuner-engines"
    return os.path.join(base or ".", f"{opts.study}-engines")


class Objective:
    """One trial: suggest a config, reuse an earlier measurement of the same build, or build it in a child."""

    def __init__(self, ctx: StudyContext, opts: TuneOptions):
        self.ctx = ctx
        self.opts = opts
        self.engines_dir = engines_dir(opts)
        self.lock_path = default_lock_path("cpu")
        self.grid_names = set(grid_space(ctx.problem)) if ctx.settings["sampler"] == "grid" else None

    def __call__(self, trial: optuna.Trial):
        ctx = self.ctx
        config = normalize(ctx.problem.space, trial_chooser(trial, self.grid_names), ctx.problem.graph_nodes,
                           ctx.settings.get("rankings"))
        key = build_key(ctx.settings, config)
        trial.set_user_attr("config", config)
        trial.set_user_attr("build_key", key)
        trial.set_user_attr("machine", ctx.settings["machine"])
        prior = self._completed_with(key, trial.number)
        if prior is not None:
            return self._reuse(trial, prior)
        out_dir = os.path.join(self.engines_dir, f"trial-{trial.number}")
        # evaluate.CACHE_DIR is read at call time: TUNER_CACHE and the tests move it.
        kwargs = {"spec": ctx.settings["spec"], "cache_dir": evaluate.CACHE_DIR, "config": config, "out_dir": out_dir,
                  "protocol": asdict(self.opts.protocol) if self.opts.protocol else None, "lock_path": self.lock_path}
        try:
            rec = run_isolated(evaluate_spec, kwargs, self.opts.trial_timeout)
        except TrialFailure as exc:
            trial.set_user_attr("fail_reason", str(exc))
            raise
        except KeyboardInterrupt:  # Optuna fails the trial and re-raises; say why
            trial.set_user_attr("fail_reason", "interrupted (Ctrl-C) during this trial")
            raise
        finally:
            if not self.opts.keep_engines:
                shutil.rmtree(out_dir, ignore_errors=True)
        for k in ("latency", "metrics", "per_output", "violations", "feasible", "build_s", "engine_bytes", "backend",
                  "timing_window"):
            trial.set_user_attr(k, rec[k])
        trial.set_user_attr("engine_dir", rec["engine_dir"] if self.opts.keep_engines else None)
        for bound, value in rec["violations"].items():
            trial.set_constraint(bound, value)
        return self._values(rec["latency"]["median_ms"], rec["metrics"])

    def _values(self, latency_ms: float, metrics: dict):
        error = min(float(metrics.get(self.ctx.problem.requirement.primary_metric, 1e30)), 1e30)
        values = {"latency": latency_ms, "error": error}
        out = [values[o] for o in self.ctx.objectives]
        return out if len(out) > 1 else out[0]

    def _completed_with(self, key: str, number: int):
        for t in self.ctx.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            # a latency measured on another machine is no measurement for this one
            if t.user_attrs.get("build_key") == key and t.number != number and same_machine(
                    t.user_attrs.get("machine") or {}, self.ctx.settings["machine"]):
                return t
        return None

    def _reuse(self, trial: optuna.Trial, prior) -> object:
        origin = prior.user_attrs.get("reused_from", prior.number)
        trial.set_user_attr("reused_from", origin)
        for k in ("latency", "metrics", "per_output", "violations", "feasible", "build_s", "engine_bytes", "backend"):
            if k in prior.user_attrs:
                trial.set_user_attr(k, prior.user_attrs[k])
        for bound, value in prior.constraints.items():
            trial.set_constraint(bound, value)
        return prior.values if len(prior.values) > 1 else prior.values[0]


# ---------------------------------------------------------------- reading a study


def is_feasible(t) -> bool:
    return t.state == TrialState.COMPLETE and all(v <= 0 for v in t.constraints.values())


def latency_of(t) -> float:
    return float(t.user_attrs.get("latency", {}).get("median_ms", float("inf")))


def baseline_trial(study: optuna.Study):
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if t.user_attrs.get("baseline"):
            return t
    return None


def best_feasible(study: optuna.Study):
    feas = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if is_feasible(t)]
    return min(feas, key=latency_of) if feas else None


def closest_candidate(study: optuna.Study):
    """The best effort when nothing is feasible: least total constraint violation, then latency."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not done:
        return None
    return min(done, key=lambda t: (sum(max(0.0, v) for v in t.constraints.values()), latency_of(t)))
