"""Optuna samplers from a study's settings (re-created on every resume: Optuna does not store them)."""
from __future__ import annotations

import warnings

import optuna

from ..configs import grid_values
from ..errors import UserError
from ..space import Space
from .plan_samplers import STRATEGIES, make_plan_sampler
from .settings import StudySettings


def grid_space(space: Space) -> dict[str, list]:
    """The coarse grid: every session and route parameter; per-layer overrides stay at their default."""
    return {p.name: grid_values(p) for p in space.params}


def plan_defaults(settings: StudySettings) -> dict:
    """Per-layer parameters whose default is not False, for the plan samplers: keep_float/top_k of a
    sensitivity ranking defaults to its greedy cut (tuner.space._ranked_choice)."""
    return {f"{name}/top_k": r["cut"] for name, r in (settings.rankings or {}).items()}


def make_sampler(settings: StudySettings, space: Space, worker: int = 0) -> optuna.samplers.BaseSampler:
    """worker: parallel workers get seed + worker, else they would all propose the same first configs.
    fast/full/mixed take no seed: their plans run in a fixed order, shared by the workers through the study."""
    name, seed = settings.sampler, settings.seed
    if name in STRATEGIES:
        return make_plan_sampler(name, space.params, defaults=plan_defaults(settings))
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
    return optuna.samplers.GridSampler(grid_space(space), seed=seed)


def sampler_options(sampler) -> dict:
    """What the study records of its sampler (the class and the options that change its proposals)."""
    opts = {"class": type(sampler).__name__}
    for k in ("_multivariate", "_group", "_n_startup_trials", "_constant_liar", "_population_size"):
        if hasattr(sampler, k):
            opts[k.lstrip("_")] = getattr(sampler, k)
    return opts
