"""Open the study a `tune` run works on: create it, or resume it with its stored settings (checking
what the user gave again), load the problem, rank layers for sensitivity-encoded overrides.
Bad input leaves nothing behind: a database file this call created is removed again."""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from dataclasses import replace

from ..analysis.rankings import ranking_notes, study_rankings
from ..backends.base import get_backend
from ..errors import UserError
from ..inputs.configs import effective_encoding
from ..problem.spec import print_notes
from ..search.choices import Timing
from ..search.enqueue import parse_enqueue
from ..search.settings import (
    allowed_metrics,
    check_data,
    check_inputs,
    check_metrics,
    given_settings,
    merge_settings,
    new_settings,
)
from ..search.study import StudyAppeared, StudyContext, create_or_resume, load_existing, stored_settings, wait_for_settings
from ..store.optuna_private import storage_of
from ..store.storage import check_study_name, holds_no_study, open_storage
from .join import this_machine
from .options import TuneOptions, engines_dir, trials_log
from .warm import warm_start


def backend_devices_of(space) -> list[str]:
    return [get_backend(name).device for name in space.backends]


def open_study(opts: TuneOptions, defer_analysis: bool = False) -> StudyContext:
    """The study of `opts`, created or resumed; with defer_analysis its layer ranking is left for
    analyze_study (tune runs the runtimes' defaults first)."""
    check_study_name(opts.study)
    path = opts.storage_url.path
    fresh = path is not None and not os.path.exists(path)
    parent = os.path.dirname(path) if path else ""
    new_parent = bool(parent) and not os.path.exists(parent)
    try:
        return _open_study(opts, defer_analysis=defer_analysis)
    except StudyAppeared as appeared:  # another `tuner tune` made it meanwhile: join it, as `--jobs` workers do
        print(f"note: study {opts.study!r} was created by another process a moment ago: joining it", file=sys.stderr)
        wait_for_settings(opts.study, appeared.storage)
        return _open_study(opts, joined=True, defer_analysis=defer_analysis)  # the other process's file: no clean-up
    except UserError:
        if fresh and holds_no_study(path):  # another process may have made a study in it meanwhile
            for leftover in (path, f"{path}-wal", f"{path}-shm"):
                with contextlib.suppress(OSError):
                    os.remove(leftover)
        if new_parent:
            with contextlib.suppress(OSError):
                os.rmdir(parent)  # only if empty: studies/ made by this call
        raise


def _open_study(opts: TuneOptions, joined: bool = False, defer_analysis: bool = False) -> StudyContext:
    """joined: a second pass, resuming the study another process created while this one prepared."""
    given = given_settings(**opts.given())
    storage = open_storage(opts.storage_url)
    study = load_existing(opts.study, storage)
    stored = stored_settings(study, load_user_metrics=False)  # a stored user metric: check_metrics's question
    settings = merge_settings(opts.study, stored, given, opts.force) if stored else new_settings(given)
    settings = check_metrics(opts.study, settings, allowed_metrics(opts.allow_metrics, given.get("requirement")),
                             opts.force, forceable=True)
    if stored:
        check_inputs(opts.study, settings, opts.force)
    # validates model, data and space before any write; the requirement was parsed once, into settings
    problem = settings.spec.load(settings.requirement)
    if stored:
        check_data(opts.study, stored, problem.data_hash)
    parse_enqueue(problem, settings, opts.enqueue)  # refused here, before the study exists or anything is built
    if not joined:
        print_notes(problem.notes)  # once the input is known good; before the sensitivity analysis, which can take minutes
    settings = replace(
        settings, data_hash=problem.data_hash, backend=",".join(problem.space.backends),  # part of every build key
        encoding={o.name: effective_encoding(o, problem.graph_nodes) for o in problem.space.overrides},
        machine=settings.machine or this_machine(problem.space),
        timing=settings.timing or (Timing.PAIRED if all(d == "cpu" for d in backend_devices_of(problem.space))
                                   else Timing.ALONE))
    before_first_trial = study is None or not study.get_trials(deepcopy=False)
    warm = warm_start(opts.warm_start, settings, problem.space) if opts.warm_start and before_first_trial else None
    for_now = [settings.space_hash, problem.data_hash]
    if warm is not None and warm.rankings:  # the same model and data: the other study's ranking holds here
        settings = replace(settings, rankings=warm.rankings, rankings_for=for_now)
    if warm is not None:
        settings = replace(settings, warm_start={"source": warm.source, "configs": len(warm.params),
                                                 "ranking_reused": bool(warm.rankings)})
    settings = replace(settings, notes=tuple(problem.notes + ranking_notes(settings.rankings)))  # the report says them too
    # The study and its settings exist before the analysis, which can take many minutes: a kill during it
    # leaves a study that `tuner tune --study NAME` resumes, re-measuring only the build that was in flight
    # (the analysis's builds are cached as they are measured: tuner.analysis.sensitivity, tuner.analysis.variants).
    study, settings = create_or_resume(opts.study, storage, study, settings, problem, opts.sampler_object)
    ctx = StudyContext(study, settings, problem, opts.storage_url, warm.params if warm is not None else [])
    return ctx if defer_analysis else analyze_study(ctx, opts)


def analysis_due(ctx: StudyContext) -> bool:
    """The study has no ranking for its space and data yet (once per space and data)."""
    return ctx.settings.rankings_for != [ctx.settings.space_hash, ctx.problem.data_hash]


def analyze_study(ctx: StudyContext, opts: TuneOptions, deadline: float | None = None,
                  on_ranking: Callable[[StudyContext], None] = lambda ctx: None) -> StudyContext:
    """Rank the layers of the sensitivity-encoded overrides where the study has no ranking yet. Each ranking is
    stored as it is made (its study re-created, so its sampler knows it) and handed to on_ranking (tune enqueues
    its greedy candidate there at once). deadline: time.monotonic() past which no build starts (--timeout)."""
    if not analysis_due(ctx):
        return ctx
    problem, storage = ctx.problem, storage_of(ctx.study)
    done: dict = {}

    def stored(name: str, ranking: dict) -> None:
        nonlocal ctx
        done[name] = ranking
        settings = replace(ctx.settings, rankings=dict(done), notes=tuple(problem.notes + ranking_notes(done)))
        study, settings = create_or_resume(opts.study, storage, ctx.study, settings, problem,
                                           opts.sampler_object)
        ctx = replace(ctx, study=study, settings=settings)
        on_ranking(ctx)

    log = trials_log(opts.study, engines_dir(opts.study, ctx.url, opts.engines_dir)) if opts.quiet else None
    rankings = study_rankings(problem, opts.trial_timeout, opts.quiet, opts.sensitivity_budget or None,
                              opts.sensitivity_method, deadline, on_ranking=stored, log_path=log)
    print_notes(ranking_notes(rankings))  # a route dropped from the analysis: said once
    settings = replace(ctx.settings, rankings_for=[ctx.settings.space_hash, problem.data_hash], rankings=rankings,
                       notes=tuple(problem.notes + ranking_notes(rankings)))
    study, settings = create_or_resume(opts.study, storage, ctx.study, settings, problem,
                                           opts.sampler_object)  # its sampler knows the ranking
    return replace(ctx, study=study, settings=settings)
