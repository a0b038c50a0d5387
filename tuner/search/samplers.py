"""Optuna samplers from a study's settings (re-created on every resume: Optuna does not store them), seeded
per trial (tuner.search.seeding), so that a resumed study proposes what a study run straight through does."""
from __future__ import annotations

import math
import warnings

import optuna

from ..errors import UserError
from ..inputs.configs import grid_values
from ..inputs.space import Space
from ..store.optuna_private import sampler_settings
from . import seeding
from .plan_samplers import STRATEGIES, make_plan_sampler
from .settings import OBJECT_PREFIX, StudySettings

GRID_MAX_POINTS = 100_000  # Optuna's grid sampler holds every point in memory, in every process


def grid_space(space: Space) -> dict[str, list]:
    """The coarse grid: every session and route parameter; per-layer overrides stay at their default."""
    return {p.name: grid_values(p) for p in space.params}


def checked_grid(space: Space) -> dict[str, list]:
    """grid_space, refused in one line where it has more than GRID_MAX_POINTS points (the default CPU space
    has some 10^8: Optuna would build them all in memory, and no study visits a fraction of them)."""
    grid = grid_space(space)
    points = math.prod(len(values) for values in grid.values())
    if points > GRID_MAX_POINTS:
        widest = sorted(grid, key=lambda name: -len(grid[name]))[:3]
        raise UserError(f"--sampler grid: this space's grid has {points:,} points (most choices: "
                        f"{', '.join(f'{n} {len(grid[n])}' for n in widest)}), over {GRID_MAX_POINTS:,}: give a smaller "
                        "space (--space FILE with fewer parameters or choices) or another sampler (tpe, random)")
    return grid


def plan_defaults(settings: StudySettings) -> dict:
    """Per-layer parameters whose default is not False, for the plan samplers: keep_float/top_k of a
    sensitivity ranking defaults to its greedy cut (tuner.inputs.space._ranked_choice)."""
    return {f"{name}/top_k": r["cut"] for name, r in (settings.rankings or {}).items()}


def make_sampler(settings: StudySettings, space: Space, worker: int = 0,
                 given: optuna.samplers.BaseSampler | None = None) -> optuna.samplers.BaseSampler:
    """Optuna's samplers take the study's seed, and draw each trial's numbers from (seed, the trial's slot)
    (tuner.search.seeding): parallel workers (`worker`, their index) propose different configs because their
    trials are different trials, and all of them share one grid order. A study stores its seed when it is
    created (search.study.create_or_resume); None here (a worker joining a study made before that) draws one
    for this process. fast/full/mixed take no seed: their plans run in a fixed order, shared by the workers
    through the study. given: the sampler object the Python API was handed, for a study stored with one."""
    name = settings.sampler
    if name.startswith(OBJECT_PREFIX):
        if given is None:
            raise UserError(f"this study samples with a sampler object ({name[len(OBJECT_PREFIX):]}) given to tuner.tune: "
                            "pass it again (tuner.tune(..., sampler=...)); a --jobs or `tuner join` worker cannot be "
                            "given one, so those need a study made with a sampler name (--sampler tpe)")
        return given
    if name in STRATEGIES:
        return make_plan_sampler(name, space.params, defaults=plan_defaults(settings))
    seed = settings.seed if settings.seed is not None else seeding.new_seed()
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    if name == "tpe":
        # multivariate=None means False for several objectives (slow and blind to interactions);
        # group=True models the conditional sub-spaces of each precision route separately.
        return seeding.TPESampler(multivariate=True, group=True, seed=seed)
    if name == "nsga2":
        return seeding.NSGAIISampler(seed=seed)
    if name == "random":
        return seeding.RandomSampler(seed=seed)
    if name == "gp":
        try:
            import torch  # noqa: F401  (GPSampler needs it)
        except ImportError:
            raise UserError("--sampler gp needs PyTorch: pip install torch") from None
        return seeding.GPSampler(seed=seed)
    return seeding.GridSampler(checked_grid(space), seed=seed)


def sampler_options(sampler) -> dict:
    """What the study records of its sampler (the class and the options that change its proposals)."""
    opts = {"class": type(sampler).__name__} | sampler_settings(sampler)
    if isinstance(sampler, seeding.PerTrialSeed):
        opts["seeded"] = "per trial"  # a study made before exact resume has not this key
    return opts
