"""A long study on one machine: the tuner's own cost per trial as a study grows to 1000 trials.

  python bench/soak_bench.py                      # 1000 trials on the demo model, the small ORT space
  python bench/soak_bench.py --trials 200 --sampler random

One in-process `tune` (the real trial loop, real SQLite, real child-process builds) with the sampler's
and the build jobs' calls timed. Per trial: its wall time (Optuna's start to complete), the sampler's share
(infer/sample calls), the jobs' share (the child that builds and measures), and the rest: the tuner's own
bookkeeping and the storage. Printed for windows of trials around 100, 500 and 1000, then the database's
size and the run times of `status`, `report`, `trials` and the notebook on the finished study.

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

from tuner.backends.openvino.device import cpu_flags  # noqa: E402
from tuner.demo import write_demo_model  # noqa: E402
from tuner.jobs import Evaluator  # noqa: E402
from tuner.measure.latency import LatencyProtocol  # noqa: E402
from tuner.run.options import TuneOptions  # noqa: E402
from tuner.run.tune import tune_study  # noqa: E402
from tuner.search import study as study_mod  # noqa: E402
from tuner.space import SPACES_DIR  # noqa: E402

SAMPLER_CALLS = ("infer_relative_search_space", "sample_relative", "sample_independent", "before_trial", "after_trial")


class Timed:
    """Seconds spent in calls, keyed by the trial number the caller is on (set by before_trial)."""

    def __init__(self):
        self.by_trial: dict[int, dict[str, float]] = {}
        self.current = -1

    def add(self, kind: str, seconds: float) -> None:
        row = self.by_trial.setdefault(self.current, {})
        row[kind] = row.get(kind, 0.0) + seconds


def timed_sampler(sampler, timed: Timed):
    for name in SAMPLER_CALLS:
        original = getattr(sampler, name)

        def wrapper(*args, _original=original, _name=name, **kwargs):
            if _name == "before_trial":
                timed.current = args[1].number
            t0 = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                timed.add("sampler", time.perf_counter() - t0)

        setattr(sampler, name, wrapper)
    return sampler


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
    wall = statistics.median(r["wall"] for r in rows)
    sampler = statistics.median(r["sampler"] for r in rows)
    rest = statistics.median(r["wall"] - r["jobs"] - r["sampler"] for r in rows)
    jobs = statistics.median(r["jobs"] for r in rows)
    own = statistics.median((r["wall"] - r["jobs"]) / r["wall"] for r in rows if r["wall"] > 0)
    return (f"{label:>14s}  n={len(rows):3d}  trial {wall * 1e3:8.1f} ms  jobs {jobs * 1e3:8.1f} ms  "
            f"sampler {sampler * 1e3:7.1f} ms  storage+bookkeeping {rest * 1e3:7.1f} ms  tuner's own {100 * own:5.1f}%")


def run_command(args: list[str], cwd: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tuner.cli", *args], cwd=cwd, check=True, capture_output=True,
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
    t0 = time.perf_counter()
    result = tune_study(TuneOptions(study="soak", model=model, storage=url, space=args.space, shapes=["x=2x64x256"],
                                    require="cos<=0.005", sampler=args.sampler, seed=0, n_trials=args.trials, quiet=True,
                                    progress=False, protocol=LatencyProtocol(max_seconds=0.3), select=False))
    total = time.perf_counter() - t0
    rows = []
    for t in result.study.trials:
        if t.datetime_start is None or t.datetime_complete is None:
            continue
        spent = timed.by_trial.get(t.number, {})
        rows.append({"number": t.number, "wall": (t.datetime_complete - t.datetime_start).total_seconds(),
                     "sampler": spent.get("sampler", 0.0), "jobs": spent.get("jobs", 0.0),
                     "built": "reused_from" not in t.user_attrs and spent.get("jobs", 0.0) > 0})
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
