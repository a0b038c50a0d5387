"""What `tune` shows while it runs: a live line (rich) on a terminal, one log line per trial otherwise."""
from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable

from optuna.trial import TrialState

from ..search.record import StoredTrial
from ..search.trials import baseline_trial, best_feasible, disturbed, fail_reason, is_feasible, latency_of, speedup_of, was_busy

LINE_WIDTH = 119  # a trial line fits a terminal; the study's log file has every detail
# The study is read for the line at most this often; in between, each finished trial is added to the last
# read: a read costs some 3 ms (bench/soak_bench.py), a real share of a sub-second trial, and the line's
# counts of other workers' trials may lag by this much.
READ_EVERY_S = 5.0


def shorten(text: str, width: int) -> str:
    """The text as is where it fits in width characters, else cut to width with "..." as its last three."""
    return text if len(text) <= width else text[: width - 3] + "..."


def _flags(trial) -> str:
    """What a trial line says of a timing that is not a plain converged pair (measure/guard.py, measure/paired.py,
    measure/load.py), in a word or two each."""
    flags = []
    if disturbed(trial):
        flags.append("baseline disturbed")
    rec = StoredTrial.of(trial)
    stopped = rec.stopped
    if stopped:
        flags.append(f"stopped early: {stopped}")
    if was_busy(trial):
        flags.append(f"busy machine ({rec.load['other_cores']:.1f} cores used by others)")
    return "".join(f", {f}" for f in flags)


def trial_state(trial, base, full: bool = False) -> str:
    """A finished trial as a trial line says it: its speedup over the baseline first ("1.84x", from the
    search: confirmed figures come from selection), milliseconds beside it. full: the whole failure reason."""
    if trial.state == TrialState.COMPLETE:
        rec = StoredTrial.of(trial)
        if rec.copied:
            return f"reused #{rec.reused_from:d}"
        up = speedup_of(trial, base)
        # the baseline against itself reads 1.00x but for noise: it is the unit, not a result
        speed = "baseline " if rec.baseline else f"{up:.2f}x " if up else ""
        return (f"{speed}{latency_of(trial):.2f} ms, {'feasible' if is_feasible(trial) else 'infeasible'}"
                + _flags(trial))
    state = trial.state.name.lower()
    reason = fail_reason(trial)
    return f"{state}: {reason if full else reason[:70]}" if reason else state


def _fmt_s(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class TrialProgress:
    """An Optuna callback that reports each finished trial. Use as a context manager."""

    def __init__(self, n_trials: int | None, timeout: float | None, live: bool, quiet: bool = False,
                 clock: Callable[[], float] = time.monotonic, log_path: str | None = None, jobs: int = 1,
                 done: int = 0):
        """live: a rich display when stderr is a terminal; quiet (or no terminal): log lines. clock: what the
        elapsed time and the ETA are read from (a test passes its own). log_path: a file that gets every
        trial's full line (appended). jobs: workers in parallel (their waits for another study's timing
        overlap). done: trials this run finished before (the defaults, before the analysis)."""
        self.n_trials, self.timeout = n_trials, timeout
        self.live = live and not quiet and sys.stderr.isatty()
        self.done = self._done_before = done
        self.waited = 0.0  # seconds the trials waited for another study's timing: not part of the ETA
        self.jobs = max(1, jobs)
        self.log_path = log_path
        self._clock = clock
        self.start = clock()
        self._progress = None
        self._task = None
        self._read: list = []  # the study's trials as last read, with the trials finished since
        self._read_at: float | None = None

    def __enter__(self):
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self._progress = Progress(TextColumn("trial"), MofNCompleteColumn(), BarColumn(), TimeElapsedColumn(),
                                      TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.description}"),
                                      transient=False)
            self._progress.start()
            self._task = self._progress.add_task("starting (trial 0 is the baseline)", total=self.n_trials,
                                                 completed=self.done)
        return self

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.stop()

    def summary(self, study, trials: list | None = None, base=None) -> str:
        trials = study.get_trials(deepcopy=False) if trials is None else trials
        done = [t for t in trials if t.state == TrialState.COMPLETE]
        feasible = sum(1 for t in done if is_feasible(t))
        failed = sum(1 for t in trials if t.state == TrialState.FAIL)
        best, base = best_feasible(trials), base or baseline_trial(trials)
        if best is None:
            best_txt = "no feasible yet"
        else:
            up = speedup_of(best, base)
            best_txt = (f"best: the baseline #{best.number}" if StoredTrial.of(best).baseline else
                        f"best {up:.2f}x #{best.number}" if up else f"best {latency_of(best):.2f} ms #{best.number}")
        busy = sum(1 for t in done if was_busy(t))
        busy_txt = f", {busy} busy" if busy else ""
        return f"{best_txt} | {feasible} feasible, {len(done) - feasible} infeasible, {failed} failed{busy_txt}"

    def _trials(self, study, finished) -> list:
        """The study's trials, read at most every READ_EVERY_S; in between, the last read with `finished`."""
        now = self._clock()
        if self._read_at is None or now - self._read_at >= READ_EVERY_S:
            self._read, self._read_at = study.get_trials(deepcopy=False), now
        else:
            self._read = sorted([t for t in self._read if t.number != finished.number] + [finished], key=lambda t: t.number)
        return self._read

    def _eta(self) -> str:
        elapsed = self._clock() - self.start
        if self.n_trials:
            elapsed = max(elapsed - self.waited / self.jobs, 0.0)  # another study's timing is not this one's pace
            return _fmt_s(elapsed / max(self.done - self._done_before, 1) * (self.n_trials - self.done))
        if self.timeout:
            return _fmt_s(max(0.0, self.timeout - elapsed))
        return "?"

    def __call__(self, study, trial) -> None:
        self.done += 1
        self.waited += StoredTrial.of(trial).lock_wait_s
        trials = self._trials(study, trial)  # once: every figure of the line from the same moment
        base = baseline_trial(trials)
        text = self.summary(study, trials, base)
        total = f"/{self.n_trials}" if self.n_trials else ""
        head = f"[{_fmt_s(self._clock() - self.start)} ETA {self._eta()}] trial {trial.number} ({self.done}{total})"
        if self.log_path:
            with open(self.log_path, "a") as log:
                log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {head} {trial_state(trial, base, full=True)} | {text}\n")
        if self._progress is not None:
            self._progress.update(self._task, advance=1, description=text)
        else:  # --quiet or not a terminal: one log line per trial, cut to the terminal's width
            line = f"{head} {trial_state(trial, base)} | {text}"
            print(shorten(line, LINE_WIDTH), file=sys.stderr, flush=True)


def progress_printer(quiet: bool, log_lines: bool, terminal: bool | None = None,
                     say: Callable[[str], None] | None = None) -> Callable[[str], None]:
    """The analysis's progress on stderr: one line rewritten on a terminal; elsewhere (log_lines) one line
    per stage ("sensitivity 1/32: ...", then "greedy: ..."), not per step; or nothing."""
    terminal = sys.stderr.isatty() if terminal is None else terminal
    if quiet or not (terminal or log_lines):
        return lambda msg: None
    if terminal:
        return lambda msg: print(f"\r{msg[:LINE_WIDTH]:{LINE_WIDTH}s}", end="", file=sys.stderr, flush=True)
    say = say or (lambda msg: print(msg, file=sys.stderr, flush=True))
    last = [None]

    def stage_lines(msg: str) -> None:
        stage = re.split(r"[\d:]", msg, maxsplit=1)[0]  # "sensitivity 3/32: block1" -> "sensitivity "
        if stage != last[0]:
            last[0] = stage
            say(msg)

    return stage_lines
