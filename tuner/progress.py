"""What `tune` shows while it runs: a live line (rich) on a terminal, one log line per trial otherwise."""
from __future__ import annotations

import sys
import time
from collections.abc import Callable

from optuna.trial import TrialState

from .search.trials import baseline_trial, best_feasible, disturbed, is_feasible, latency_of, relative_of, speedup_of, was_busy


def _timing_note(trial) -> str:
    """What the trial line says of a timing that is not a converged pair (measure/guard.py, measure/paired.py)."""
    if disturbed(trial):
        return ", baseline window disturbed (scored against the study's baseline band, not a finalist)"
    stopped = (trial.user_attrs.get("relative") or {}).get("stopped")
    return f", timing stopped early ({stopped}: it cannot win)" if stopped else ""


def _fmt_s(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class TrialProgress:
    """An Optuna callback that reports each finished trial. Use as a context manager."""

    def __init__(self, n_trials: int | None, timeout: float | None, live: bool, quiet: bool = False,
                 clock: Callable[[], float] = time.monotonic):
        """live: a rich display when stderr is a terminal; quiet (or no terminal): log lines. clock: what the
        elapsed time and the ETA are read from (a test passes its own)."""
        self.n_trials, self.timeout = n_trials, timeout
        self.live = live and not quiet and sys.stderr.isatty()
        self.done = 0
        self._clock = clock
        self.start = clock()
        self._progress = None
        self._task = None

    def __enter__(self):
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self._progress = Progress(TextColumn("trial"), MofNCompleteColumn(), BarColumn(), TimeElapsedColumn(),
                                      TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.description}"),
                                      transient=False)
            self._progress.start()
            self._task = self._progress.add_task("starting (trial 0 is the baseline)", total=self.n_trials)
        return self

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.stop()

    def summary(self, study) -> str:
        trials = study.get_trials(deepcopy=False)
        done = [t for t in trials if t.state == TrialState.COMPLETE]
        feasible = sum(1 for t in done if is_feasible(t))
        failed = sum(1 for t in trials if t.state == TrialState.FAIL)
        best, base = best_feasible(study), baseline_trial(study)
        if best is None:
            best_txt = "no feasible trial yet"
        else:
            up = speedup_of(best, base)
            how = "paired" if relative_of(best) is not None else "vs the baseline's first timing"
            speed = f" ({up:.2f}x baseline, {how})" if up else ""
            best_txt = f"best {latency_of(best):.2f} ms{speed} #{best.number}"
        busy = sum(1 for t in done if was_busy(t))
        busy_txt = f", {busy} timed on a busy machine" if busy else ""
        return f"{best_txt} | feasible {feasible}, infeasible {len(done) - feasible}, failed {failed}{busy_txt}"

    def _eta(self) -> str:
        elapsed = self._clock() - self.start
        if self.n_trials:
            return _fmt_s(elapsed / max(self.done, 1) * (self.n_trials - self.done))
        if self.timeout:
            return _fmt_s(max(0.0, self.timeout - elapsed))
        return "?"

    def __call__(self, study, trial) -> None:
        self.done += 1
        text = self.summary(study)
        if self._progress is not None:
            self._progress.update(self._task, advance=1, description=text)
        else:  # --quiet or not a terminal: one log line per trial
            state = trial.state.name.lower()
            if trial.state == TrialState.COMPLETE:
                state = f"reused #{trial.user_attrs['reused_from']:d}" if "reused_from" in trial.user_attrs else (
                    f"{latency_of(trial):.2f} ms" + (f" ({relative_of(trial):.3f} of the baseline)" if relative_of(trial) else "")
                    + f", {'feasible' if is_feasible(trial) else 'infeasible'}"
                    + _timing_note(trial)
                    + (f", BUSY machine ({trial.user_attrs['load']['other_cores']:.1f} cores used by others)"
                       if was_busy(trial) else ""))
            elif "fail_reason" in trial.user_attrs:
                state += f": {trial.user_attrs['fail_reason']}"
            elif "known_failure" in trial.user_attrs:
                state += f": its route failed to build in trial {trial.user_attrs['known_failure']['trial']}, not built again"
            total = f"/{self.n_trials}" if self.n_trials else ""
            print(f"[{_fmt_s(self._clock() - self.start)} ETA {self._eta()}] trial {trial.number} "
                  f"({self.done}{total}) {state} | {text}", file=sys.stderr, flush=True)


def progress_printer(quiet: bool, log_lines: bool) -> Callable[[str], None]:
    """The analysis's progress on stderr: one line rewritten on a terminal; elsewhere one line per step
    (log_lines) or nothing."""
    if quiet or not (sys.stderr.isatty() or log_lines):
        return lambda msg: None
    if sys.stderr.isatty():
        return lambda msg: print(f"\r{msg:70s}", end="", file=sys.stderr, flush=True)
    return lambda msg: print(msg, file=sys.stderr, flush=True)
