"""A long study on one machine: the tuner's own cost per trial as a study grows to 1000 trials.

  python bench/soak_bench.py                      # 1000 trials on the demo model, the small ORT space
  python bench/soak_bench.py --trials 200 --sampler random

One in-process `tune` (the real trial loop, real SQLite, real child-process builds) with the sampler's, the
build jobs' and the storage's calls timed. Per trial, its cycle (one sampler before_trial to the next: the
claim, Optuna's ask and tell, the objective, the progress line) is split into: the jobs (the child that
builds and measures), the sampler (Optuna's infer/sample calls and the per-trial seeding, which makes the
trial's one read of the study, shared with the objective), Optuna's own storage calls outside the sampler
(create the trial, write each suggested parameter, the state, read the trial back), and the rest: the
tuner's own (its objective, records, claims, progress and their storage calls). Printed for windows of
trials around 100, 500 and 1000, then the database's size and the run times of `status`, `report`, `trials`
and the notebook on the finished study.

The small space has 24 distinct builds: after them most trials reuse a measured build (milliseconds), so
the study soon measures the tuner itself. The overhead target (<= 2% of a trial) is read against trials
that build (`built` rows), as a user's study's trials do. Prints figures; asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from optuna.storages._cached_storage import _CachedStorage  # noqa: E402

from tuner.cli.demo import write_demo_model  # noqa: E402
from tuner.execute.jobs import Evaluator  # noqa: E402
from tuner.inputs.space import SPACES_DIR  # noqa: E402
from tuner.measure.latency import LatencyProtocol  # noqa: E402
from tuner.measure.machine import cpu_flags  # noqa: E402
from tuner.run.options import TuneOptions  # noqa: E402
from tuner.run.tune import tune_study  # noqa: E402
from tuner.search import study as study_mod  # noqa: E402

SAMPLER_CALLS = ("infer_relative_search_space", "sample_relative", "sample_independent", "before_trial", "after_trial")
# Optuna's functions whose storage calls are Optuna's own work for a trial (any study makes them)
OPTUNA_OWN = {"_suggest", "ask", "tell", "_tell_with_warning", "_run_trial", "_optimize_sequential",
              "_pop_waiting_trial_id"}
TUNER_DIR = os.path.join(ROOT, "tuner")


class Timed:
    """Seconds spent in calls, keyed by the trial number the caller is on (set by before_trial)."""

    def __init__(self):
        self.by_trial: dict[int, dict[str, float]] = {}
        self.started: dict[int, float] = {}  # perf_counter at each trial's before_trial
        self.current = -1
        self.depth = 0  # inside a timed call: the calls it makes are its own

    def add(self, kind: str, seconds: float) -> None:
        row = self.by_trial.setdefault(self.current, {})
        row[kind] = row.get(kind, 0.0) + seconds


def timed_sampler(sampler, timed: Timed):
    for name in SAMPLER_CALLS:
        original = getattr(sampler, name)

        def wrapper(*args, _original=original, _name=name, **kwargs):
            t0 = time.perf_counter()
            if _name == "before_trial":
                timed.current = args[1].number
                timed.started[timed.current] = t0
            timed.depth += 1
            try:
                return _original(*args, **kwargs)
            finally:
                timed.depth -= 1
                timed.add("sampler", time.perf_counter() - t0)

        setattr(sampler, name, wrapper)
    return sampler


def optunas_own(frame) -> bool:
    """Whether the storage call was made by Optuna's own trial machinery (not by tuner code calling Optuna)."""
    while frame is not None:
        code = frame.f_code
        if code.co_filename.startswith(TUNER_DIR):
            return False
        if code.co_name in OPTUNA_OWN and "optuna" in code.co_filename:
            return True
        frame = frame.f_back
    return False


def timed_storage(timed: Timed) -> None:
    """Optuna's own storage calls (outside the sampler's, counted there) as "optuna storage"; the time spent
    telling them apart as "probe", left out of the cycle."""
    for name in ("create_new_trial", "set_trial_param", "set_trial_state_values", "get_trial", "get_all_trials",
                 "set_trial_system_attr", "get_trial_system_attrs", "set_trial_user_attr", "get_study_user_attrs"):
        original = getattr(_CachedStorage, name)

        def wrapper(self, *args, _original=original, **kwargs):
            if timed.depth:
                return _original(self, *args, **kwargs)
            t0 = time.perf_counter()
            timed.depth += 1
            try:
                return _original(self, *args, **kwargs)
            finally:
                timed.depth -= 1
                t1 = time.perf_counter()
                if optunas_own(sys._getframe(1)):
                    timed.add("optuna storage", t1 - t0)
                timed.add("probe", time.perf_counter() - t1)

        setattr(_CachedStorage, name, wrapper)


def timed_jobs(timed: Timed) -> None:
    original = Evaluator._call

    def call(self, fn, **kwargs):
        t0 = time.perf_counter()
        try:
            return original(self, fn, **kwargs)
        finally:
            timed.add("jobs", time.perf_counter() - t0)

    Evaluator._call = call


def window(rows: list[dict], around: int, half: int = 25) -> list[dict]:
    return [r for r in rows if around - half <= r["number"] < around + half]


def describe(rows: list[dict], label: str) -> str:
    if not rows:
        return f"{label:>14s}  (no trials)"

    def med(key) -> float:
        return statistics.median(key(r) for r in rows) * 1e3

    own = statistics.median(r["own"] / r["cycle"] for r in rows if r["cycle"] > 0)
    return (f"{label:>14s}  n={len(rows):3d}  trial {med(lambda r: r['cycle']):8.1f} ms  jobs {med(lambda r: r['jobs']):8.1f}"
            f"  sampler {med(lambda r: r['sampler']):6.1f}  optuna's storage calls {med(lambda r: r['optuna']):5.1f}"
            f"  tuner's own {med(lambda r: r['own']):5.1f} ms = {100 * own:4.1f}%")


def run_command(args: list[str], cwd: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tuner.cli.main", *args], cwd=cwd, check=True, capture_output=True,
                   env=dict(os.environ, PYTHONPATH=ROOT))
    return time.perf_counter() - t0


def run_notebook(url: str, cwd: str) -> float | None:
    try:
        import nbclient
        import nbformat
    except ImportError:
        return None
    nb = nbformat.read(os.path.join(ROOT, "notebooks", "analyze_study.ipynb"), as_version=4)
    os.environ.update(TUNER_STORAGE=url, TUNER_STUDY="soak")  # the notebook's kernel reads them
    t0 = time.perf_counter()
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": cwd}}).execute()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--sampler", default="tpe")
    ap.add_argument("--space", default=os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml"))
    args = ap.parse_args()
    print(f"CPU flags: {' '.join(sorted(cpu_flags() or ['unknown']))}")
    work = tempfile.mkdtemp(prefix="tuner-soak-")
    os.environ.setdefault("TUNER_CACHE", os.path.join(work, "cache"))
    model = write_demo_model(os.path.join(work, "demo.onnx"))
    url = f"sqlite:///{work}/soak.db"
    timed = Timed()
    make = study_mod.make_sampler
    study_mod.make_sampler = lambda *a, **k: timed_sampler(make(*a, **k), timed)
    timed_jobs(timed)
    timed_storage(timed)
    t0 = time.perf_counter()
    result = tune_study(TuneOptions.of(study="soak", model=model, storage=url, space=args.space, shapes=["x=2x64x256"],
                                    require="cos<=0.005", sampler=args.sampler, seed=0, n_trials=args.trials, quiet=True,
                                    progress=False, protocol=LatencyProtocol(max_seconds=0.3), select=False))
    total = time.perf_counter() - t0
    rows = []
    for t in result.study.trials:
        start, end = timed.started.get(t.number), timed.started.get(t.number + 1)
        if start is None or end is None:  # the last trial's cycle has no end here
            continue
        spent = timed.by_trial.get(t.number, {})
        row = {"number": t.number, "cycle": end - start - spent.get("probe", 0.0), "sampler": spent.get("sampler", 0.0),
               "jobs": spent.get("jobs", 0.0), "optuna": spent.get("optuna storage", 0.0),
               "built": "reused_from" not in t.user_attrs and spent.get("jobs", 0.0) > 0}
        row["own"] = row["cycle"] - row["jobs"] - row["sampler"] - row["optuna"]
        rows.append(row)
    print(f"{len(rows)} trials in {total / 60:.1f} min ({args.sampler}, {os.path.basename(args.space)})")
    for around in (100, 500, 1000):
        print(describe(window(rows, around), f"trials ~{around}"))
    built = [r for r in rows if r["built"]]
    print(describe(built, "built trials"))
    print(describe([r for r in rows if not r["built"]], "reused trials"))
    db = url[len("sqlite:///"):]
    print(f"database: {os.path.getsize(db) / 1e6:.1f} MB for {len(rows)} trials")
    storage = ["--study", "soak", "--storage", url]
    print(f"tuner status: {run_command(['status', *storage], work):.1f} s")
    print(f"tuner report: {run_command(['report', *storage, '--out', os.path.join(work, 'r.html')], work):.1f} s")
    try:
        print(f"tuner trials: {run_command(['trials', *storage], work):.1f} s")
    except subprocess.CalledProcessError:
        print("tuner trials: not available in this version")
    nb = run_notebook(url, work)
    print(f"notebook: {nb:.1f} s" if nb is not None else "notebook: not run (nbclient or the notebook missing)")


if __name__ == "__main__":
    main()
