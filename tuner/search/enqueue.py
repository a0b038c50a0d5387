"""Configs a study tries first: the baseline (the backend's defaults, trial 0), in a space over several
backends each other backend's own defaults, a runtime's defaults in float32 where its defaults missed the
requirement, the greedy float set of a sensitivity ranking, and the user's --enqueue configs."""
from __future__ import annotations

from optuna.trial import TrialState

from ..backends.base import get_backend
from ..errors import GATE, UserError
from ..inputs.configs import defaults_chooser, normalize, parse_set, trial_params
from ..inputs.space import BACKEND, Space
from ..problem.spec import Problem
from .record import BASELINE, ENQUEUED, StoredStudy, StoredTrial
from .settings import StudySettings
from .study import StudyContext
from .trials import FLOAT32_DEFAULTS, is_feasible, is_runtime_defaults

BASELINE_ENQUEUED = "baseline_enqueued"


def params_for(space: Space, graph_nodes: list, values: dict, grid: bool, rankings: dict | None = None,
               by_key: dict | None = None) -> dict:
    """The Optuna parameters of the config with `values` (by parameter name), then `by_key` (by config key,
    where the parameter offers it), and every other parameter at its default."""
    choose = defaults_chooser(values, by_key)
    if grid:  # GridSampler needs every grid parameter fixed, active or not
        return {p.name: choose(p) for p in space.params}
    return trial_params(space, choose, graph_nodes, rankings)


def baseline_params(ctx: StudyContext) -> dict:
    p = ctx.problem
    return params_for(p.space, p.graph_nodes, {}, ctx.settings.sampler == "grid", ctx.settings.rankings)


def baseline_config(ctx: StudyContext) -> dict:
    """The config of the baseline (every parameter at its default: the backend's own choices), the one
    paired timing measures each candidate against."""
    p = ctx.problem
    return normalize(p.space, defaults_chooser({}), p.graph_nodes, ctx.settings.rankings)


def parse_enqueue(problem: Problem, settings: StudySettings, items: list[str]) -> list[dict]:
    """The parameters of each --enqueue config. Checked when the study is opened, before it is
    created, so a bad --enqueue leaves no study behind."""
    out = []
    for item in items:
        sets = [s for s in item.split(",") if s.strip()]
        try:
            values = parse_set(sets, problem.space)
        except UserError as exc:  # the item as given, then what parse_set found wrong in it
            raise UserError(f"--enqueue {item!r}: {str(exc).removeprefix('--set ')}") from None
        out.append(params_for(problem.space, problem.graph_nodes, values, settings.sampler == "grid",
                              settings.rankings))
    return out


def enqueue_initial(ctx: StudyContext, extra: list[str]) -> None:
    """Trial 0 is the default configuration (once per study); in a space over several backends, the
    other backends' own defaults next (what a user would try instead: "just use OpenVINO"); then another
    study's best configs (--warm-start, its winner first), the greedy set of each sensitivity ranking
    (once per ranking: with the route options of the variant it was ranked for, and the backend's settings
    for the float parts it was measured with, e.g. OpenVINO's bf16 where the CPU has BF16), then any
    --enqueue configs. tune queues the defaults before its analysis (enqueue_defaults) and the rest once the
    rankings exist (enqueue_found), each greedy set as soon as its ranking is made (enqueue_greedy)."""
    enqueue_defaults(ctx)
    enqueue_found(ctx, extra)


def enqueue_defaults(ctx: StudyContext) -> None:
    """The baseline (once per study) and, in a space over several backends, each other backend's defaults."""
    study, problem = ctx.study, ctx.problem
    grid = ctx.settings.sampler == "grid"
    rankings = ctx.settings.rankings
    if not StoredStudy.of(study).marked(BASELINE_ENQUEUED):
        with GATE.deferred():  # queued and marked, or neither (a resume would queue it twice)
            study.enqueue_trial(baseline_params(ctx), user_attrs={BASELINE: True})
            study.set_user_attr(BASELINE_ENQUEUED, True)
    chooser = problem.space.param(BACKEND)
    for backend in chooser.choices if chooser is not None else []:
        if backend != chooser.default and not StoredStudy.of(study).marked(f"defaults_enqueued/{backend}"):
            with GATE.deferred():
                study.enqueue_trial(params_for(problem.space, problem.graph_nodes, {BACKEND: backend}, grid,
                                               rankings), user_attrs={ENQUEUED: f"{backend} defaults"})
                study.set_user_attr(f"defaults_enqueued/{backend}", True)


def enqueue_float32_defaults(ctx: StudyContext) -> int:
    """Each runtime's defaults again with its float32 settings (Backend.float32: OpenVINO's f32 hint), where
    its defaults trial completed and missed the requirement and the space offers those settings: a runtime
    whose own precision is below float32 (OpenVINO's bf16 on a CPU with BF16) trades accuracy silently, and
    its float32 engine is what a user tries next. On PP-OCRv4's recognizer (AVX-512 BF16 CPU) OpenVINO's
    defaults read cos 0.032 against a bound of 0.01 and its f32 engine 2.5x ONNX Runtime's; 30 TPE trials
    did not find it. Once per runtime per study; returns how many were queued."""
    study, problem = ctx.study, ctx.problem
    grid, rankings = ctx.settings.sampler == "grid", ctx.settings.rankings
    multi = problem.space.param(BACKEND) is not None
    queued = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        rec = StoredTrial.of(t)
        if not is_runtime_defaults(t) or is_feasible(t) or not rec.has_config:
            continue
        backend = problem.backend_name(rec.config)
        done = f"float32_enqueued/{backend}"
        if StoredStudy.of(study).marked(done):
            continue
        params = params_for(problem.space, problem.graph_nodes, {BACKEND: backend} if multi else {}, grid, rankings,
                            by_key=get_backend(backend).float32)
        with GATE.deferred():
            study.set_user_attr(done, True)
            if params != t.params:  # the space offers the settings: another engine than the defaults
                study.enqueue_trial(params, user_attrs={ENQUEUED: backend + FLOAT32_DEFAULTS}, skip_if_exists=True)
                queued += 1
    return queued


def enqueue_found(ctx: StudyContext, extra: list[str]) -> None:
    """--warm-start's configs, each ranking's greedy set (enqueue_greedy), then the --enqueue configs: what
    the study tries once its rankings exist (their parameters depend on them)."""
    queued = parse_enqueue(ctx.problem, ctx.settings, extra)
    for i, params in enumerate(ctx.warm_params):
        ctx.study.enqueue_trial(params, user_attrs={ENQUEUED: f"warm start {i + 1}"}, skip_if_exists=True)
    enqueue_greedy(ctx)
    for item, params in zip(extra, queued):
        ctx.study.enqueue_trial(params, user_attrs={ENQUEUED: item}, skip_if_exists=True)


def enqueue_greedy(ctx: StudyContext) -> None:
    """The greedy set of each sensitivity ranking the study has, once per ranking."""
    study, problem = ctx.study, ctx.problem
    grid = ctx.settings.sampler == "grid"
    rankings = ctx.settings.rankings
    for name, r in (rankings or {}).items():
        if r["greedy_feasible"] and not StoredStudy.of(study).marked(f"greedy_enqueued/{r['table_key']}"):
            route_param, _ = problem.space.route_param(next(o for o in problem.space.overrides if o.name == name))
            values = {route_param: r["route"]["precision"], f"{name}/top_k": r["cut"]}
            if BACKEND in r["route"]:
                values[BACKEND] = r["route"][BACKEND]
            by_key = (r.get("variant") or {}) | (r.get("settings") or {})
            with GATE.deferred():
                study.enqueue_trial(params_for(problem.space, problem.graph_nodes, values, grid, rankings, by_key),
                                    user_attrs={ENQUEUED: "greedy"})
                study.set_user_attr(f"greedy_enqueued/{r['table_key']}", True)
