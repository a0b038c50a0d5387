"""`tuner trials` and `tuner profile`: read-only looks into a study (the parsers are in cli.py)."""
from __future__ import annotations

import sys
from dataclasses import replace

from ..errors import TrialFailure, UserError
from ..execute.jobs import Evaluator
from ..execute.profiling import check_profiled
from ..inputs.model import consumers_of
from ..inputs.user_paths import check_output_file
from ..measure.requirement import Requirement
from ..report.profile_table import attribute, by_op, profile_lines, profile_rows
from ..report.trials_table import sort_rows, table_lines, trial_rows, write_csv
from ..search.reading import load_checked
from ..search.record import StoredStudy, StoredTrial
from ..search.settings import SETTINGS_ATTR
from ..search.study import stored_settings
from ..search.trials import baseline_trial, best_feasible, latency_of, speedup_of
from ..store.storage import study_url


def cmd_trials(args) -> int:
    if args.csv:
        check_output_file(args.csv, "--csv")
    url = study_url(args.study, args.storage)
    view, rows = trial_rows(load_checked(args.study, url, reading=True))
    rows = sort_rows(rows, args.sort)
    for line in table_lines(view, rows):
        print(line)
    if args.csv:
        write_csv(view, rows, args.csv)
        print(f"every column of the {len(rows)} trials written to {args.csv}")
    return 0


def _profiled_trial(study, number: int | None):
    """(the trial to profile, what it is): --trial N, else the winner, else the best feasible trial."""
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    if number is not None:
        t = trials.get(number)
        if t is None or not StoredTrial.of(t).has_config:
            raise UserError(f"study {study.study_name!r} has no trial {number} with a config; `tuner trials --study "
                            f"{study.study_name}` lists them")
        return t, f"trial {number}"
    winner = StoredStudy.of(study).winner
    if winner and winner.trial in trials:
        return trials[winner.trial], f"the winner (trial {winner.trial})"
    best = best_feasible(study)
    if best is None:
        raise UserError(f"study {study.study_name!r} has no winner and no feasible trial to profile; run `tuner tune` "
                        "further, or give --trial N")
    print(f"note: study {study.study_name!r} has no confirmed winner (`tuner select` picks one): profiling the best "
          f"feasible trial of the search, {best.number}", file=sys.stderr)
    return best, f"the best feasible trial ({best.number})"


def cmd_profile(args) -> int:
    url = study_url(args.study, args.storage)
    study = load_checked(args.study, url, reading=True)
    settings = stored_settings(study, load_user_metrics=False)
    if settings is None:
        raise UserError(f"study {args.study!r} was not made by engine-tuner (no {SETTINGS_ATTR})")
    base = baseline_trial(study)
    if base is None:
        raise UserError(f"study {args.study!r} has no baseline trial yet (its first trial, the backend's defaults); "
                        f"run `tuner tune --study {args.study}`")
    target, what = _profiled_trial(study, args.trial)
    configs = [StoredTrial.of(base).config, StoredTrial.of(target).config]
    # profiling checks no accuracy: the requirement (and any user metric it names) is left out
    problem = replace(settings.spec, require=None).load(Requirement(()))
    names = [problem.backend_name(c) for c in configs]
    for name in names:
        check_profiled(name)
    try:
        with Evaluator(problem.loaded, timeout_s=1800.0, study=study.study_name) as evaluator:
            raw = evaluator.profile(configs)
    except TrialFailure as exc:
        raise UserError(f"profiling failed{' during ' + exc.phase if exc.phase else ''}: {exc}") from None
    consumers = consumers_of(problem.model.proto)
    tables = [attribute(r, problem.graph_nodes, consumers) for r in raw]
    if args.by == "op":
        tables = [by_op(t) for t in tables]
    up = speedup_of(target, base)
    route = configs[1].get("precision") or "?"
    print(f"{what}: {route} on {names[1]}" + (f", {up:.2f}x the baseline in the search ({latency_of(target):.3f} ms)"
                                              if up and target.number != base.number else ""))
    print(f"baseline (trial {base.number}): {configs[0].get('precision') or '?'} on {names[0]}, "
          f"{latency_of(base):.3f} ms in the search")
    print(f"per-{'node' if args.by == 'node' else 'op type'} kernel time from the {' and '.join(sorted(set(names)))} "
          f"profiler, median run of each, shape {', '.join(f'{k}={tuple(v)}' for k, v in problem.shapes.items())}; "
          "share: of that engine's total; ratio: winner ms / baseline ms")
    for line in profile_lines(profile_rows(tables[0], tables[1], args.limit), "node" if args.by == "node" else "op type"):
        print(line)
    return 0
