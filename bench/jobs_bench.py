"""Trials per hour on the demo model with `tune --jobs 1` and `--jobs 2` (issue 5). Prints figures.

  python bench/jobs_bench.py --n-trials 16 --jobs 1 2

Same study settings and seed for each job count, fresh study each time; selection is skipped so
only the search is timed. With jobs > 1 builds overlap while timing stays one at a time, so the
gain depends on how much of a trial is building (the rest waits for the timing lock).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from tuner.cli.demo import write_demo_model
from tuner.measure.latency import LatencyProtocol
from tuner.run.options import TuneOptions
from tuner.run.tune import tune_study
from tuner.search.trials import is_feasible


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-trials", type=int, default=16, help="trials per run (default 16)")
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 2], help="job counts to compare (default 1 2)")
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="bench-jobs-")
    model = write_demo_model(os.path.join(work, "demo.onnx"), outliers=2)
    rates = {}
    for jobs in args.jobs:
        opts = TuneOptions.of(study=f"jobs{jobs}", model=model, storage=f"sqlite:///{work}/jobs{jobs}.db",
                           shapes=["x=8x64x256"], require="cos<=0.005", n_trials=args.n_trials, seed=0, jobs=jobs,
                           quiet=True, progress=False, select=False, protocol=LatencyProtocol(max_seconds=3))
        t0 = time.perf_counter()
        result = tune_study(opts)
        wall = time.perf_counter() - t0
        rates[jobs] = result.trials_run / wall * 3600
        feasible = sum(is_feasible(t) for t in result.study.trials)
        print(f"--jobs {jobs}: {result.trials_run} trials in {wall:.0f} s = {rates[jobs]:.0f} trials/hour "
              f"({feasible} feasible)", flush=True)
    base = rates.get(args.jobs[0])
    for jobs, rate in rates.items():
        print(f"  --jobs {jobs}: {rate / base:.2f}x the trials/hour of --jobs {args.jobs[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
