"""Reading a study's trials: feasibility, latency, the baseline, the best feasible and the closest one."""
from __future__ import annotations

import numpy as np
import optuna
from optuna.trial import TrialState

from ..errors import EXIT_ALL_FAILED, EXIT_NONE_FEASIBLE
from ..store.optuna_private import cached_trials
from .record import StoredTrial


def trials_of_this_trial(study: optuna.Study, states: tuple[TrialState, ...] | None = None) -> list:
    """The study's trials as read once for the trial running in this thread: Optuna's own per-trial read
    (store.optuna_private.cached_trials), which its samplers share. Every reader during a trial (the sampler's
    seeding, the objective) takes the same read instead of a query each (bench/soak_bench.py: some 3 ms a query
    on SQLite). Do not mutate them."""
    return cached_trials(study, states)


def is_feasible(t) -> bool:
    return t.state == TrialState.COMPLETE and all(v <= 0 for v in t.constraints.values())


def latency_of(t) -> float:
    """The absolute median latency (ms) the trial measured."""
    return StoredTrial.of(t).median_ms


def relative_of(t) -> float | None:
    """Candidate / baseline timed in the same window (paired timing), or None for a trial timed alone."""
    return StoredTrial.of(t).ratio


def speed_key(t) -> float:
    """What ranks trials by speed: the paired ratio where there is one (load drift cancels in it), else ms."""
    rel = relative_of(t)
    return rel if rel is not None else latency_of(t)


def speedup_of(t, base) -> float | None:
    """How many times faster than the baseline: 1 / ratio from paired timing, else baseline ms / trial ms."""
    rel = relative_of(t)
    if rel is not None:
        return 1.0 / rel if rel > 0 else None
    return latency_of(base) / latency_of(t) if base is not None and latency_of(t) > 0 else None


def disturbed(t) -> bool:
    """The baseline's window fell outside the study's band (measure/guard.py): the ratio was not read from a
    fair window, and the trial is scored against the baseline's history instead."""
    return StoredTrial.of(t).disturbed


def stopped_early(t) -> bool:
    """Its timing stopped once it could not win (measure/paired.py): a bound, not a converged ratio."""
    return bool(StoredTrial.of(t).stopped)


def is_trusted(t) -> bool:
    """A timing that may become the best so far or a finalist: neither disturbed nor stopped early."""
    return not disturbed(t) and not stopped_early(t)


def was_busy(t) -> bool:
    """Timed while other processes kept the machine busy (tuner.measure.load)."""
    return StoredTrial.of(t).busy


def fail_reason(t) -> str:
    """Why a trial ended without a measurement, on one line: the failure it stored (its whitespace run
    together), else the earlier trial whose route failed to build and why (a known failure, pruned without
    a build); "" for a completed trial or one with neither."""
    if t.state == TrialState.COMPLETE:
        return ""
    rec = StoredTrial.of(t)
    if rec.fail_reason:
        return " ".join(str(rec.fail_reason).split())
    seen = rec.known_failure
    if seen:
        return f"route failed in trial {seen.get('trial')}: {seen.get('reason', '')}"
    return ""


def completed(study: optuna.Study | list) -> list:
    """The completed trials of a study, or of trials read already (a caller that needs several views of one
    moment reads the storage once: a read costs more as the study grows)."""
    if isinstance(study, list):
        return [t for t in study if t.state == TrialState.COMPLETE]
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def baseline_trial(study: optuna.Study | list):
    return next((t for t in completed(study) if StoredTrial.of(t).baseline), None)


FLOAT32_DEFAULTS = " defaults in float32"  # ENQUEUED of a runtime's defaults with its float32 settings


def is_runtime_defaults(t) -> bool:
    """A trial of a runtime's own defaults: the baseline, or another backend's (queued as "<backend> defaults")."""
    rec = StoredTrial.of(t)
    return rec.baseline or str(rec.enqueued or "").endswith(" defaults")


def is_first_look(t) -> bool:
    """A trial run before the analysis: a runtime's defaults, or its defaults in float32 (search.enqueue)."""
    return is_runtime_defaults(t) or str(StoredTrial.of(t).enqueued or "").endswith(FLOAT32_DEFAULTS)


def runtime_defaults_trials(trials: list) -> list:
    """The completed trials of the other runtimes' own defaults, the baseline's runtime left out."""
    return [t for t in trials if t.state == TrialState.COMPLETE and is_runtime_defaults(t)
            and not (rec := StoredTrial.of(t)).baseline and not rec.copied]


def best_feasible(study: optuna.Study | list):
    feas = [t for t in completed(study) if is_feasible(t) and is_trusted(t)]
    return min(feas, key=speed_key) if feas else None


def study_outcome(study: optuna.Study) -> tuple[int, str | None]:
    """(exit code, why) of a finished run, so a batch script can tell a study that found nothing from one
    that did: 3 when every trial failed, 4 when trials completed but none meets the requirement."""
    trials = study.get_trials(deepcopy=False)
    done = completed(trials)
    failed = [t for t in trials if t.state == TrialState.FAIL]
    ended = [t for t in trials if t.state in (TrialState.FAIL, TrialState.PRUNED)]  # pruned: a known failure reused
    if not done and failed:
        reason = " ".join(str(StoredTrial.of(failed[0]).fail_reason or "no reason stored").split())
        return EXIT_ALL_FAILED, (f"every trial failed ({len(ended)}); the first: "
                                 f"{reason[:150] + '...' if len(reason) > 150 else reason}; `tuner status` lists them")
    if done and not any(is_feasible(t) for t in done):
        return EXIT_NONE_FEASIBLE, f"none of the {len(done)} completed trials meets the requirement"
    return 0, None


def closest_candidate(study: optuna.Study):
    """The best effort when nothing is feasible: least total constraint violation, then latency."""
    done = completed(study)
    if not done:
        return None
    return min(done, key=lambda t: (sum(max(0.0, v) for v in t.constraints.values()), speed_key(t)))


def analysis_cost(rankings: dict | None) -> tuple[int, float]:
    """(builds, seconds) the study's analysis (its settings' rankings) took (0 where it came from the cache)."""
    rankings = rankings or {}
    return (sum(r.get("analysis_builds", r.get("greedy_builds", 0)) for r in rankings.values()),
            sum(r.get("analysis_s", 0.0) for r in rankings.values()))


def work_line(trials: list, rankings: dict | None) -> str:
    """"N trials + M analysis builds, T s": everything the study built (rankings: its settings')."""
    builds, seconds = analysis_cost(rankings)
    extra = f" + {builds} analysis builds ({seconds:.0f} s)" if builds else ""
    return f"{len(trials)} trials{extra}"


MODE_GAP = 1.15  # baseline processes whose medians differ by more than this (and whose windows do not overlap)


def baseline_modes(trials: list) -> str:
    """"" where every process that timed the baseline read it alike; else one line saying that they did not:
    a per-process mode (ONNX Runtime's defaults ran 24.5 ms in 1 of 10 fresh processes on a 2-core machine,
    18 ms in the rest), which scales every ratio timed against that process. Beyond the noise: the processes'
    medians differ by MODE_GAP or more and the slower one's fastest window is slower than the faster one's
    slowest window. From each trial's own window (copies of another trial's measurement left out)."""
    windows: dict[int, list[float]] = {}
    for t in trials:
        rec = StoredTrial.of(t)
        if rec.baseline_pid is not None and rec.baseline_latency and not rec.copied:
            windows.setdefault(rec.baseline_pid, []).append(float(rec.baseline_latency["median_ms"]))
    if len(windows) < 2:
        return ""
    medians = {pid: float(np.median(w)) for pid, w in windows.items()}
    fast, slow = min(medians, key=medians.get), max(medians, key=medians.get)
    if medians[slow] < MODE_GAP * medians[fast] or min(windows[slow]) <= max(windows[fast]):
        return ""
    return (f"the baseline read {medians[fast]:.2f} ms in one process and {medians[slow]:.2f} ms in another "
            f"({len(windows)} processes timed it): a mode of the process, not of the engine; trials timed against "
            "the slow one read faster than they are (the deployment check after selection times each engine in "
            "several fresh processes)")
