"""SQLite (WAL, BEGIN IMMEDIATE) against Optuna's journal file with N local processes on one study
(issue 5: which storage `tune --jobs N` should use). Prints figures; asserts nothing.

  python bench/storage_bench.py --workers 1 2 4 --trials 60

Each worker runs the synthetic objective (real space of the demo model, random sampler, the user
attrs a real trial stores, no builds), so the storage is the bottleneck, far more than in a real
study. Before the workers start, 8 distinct configs are enqueued: each must run exactly once.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile

import optuna
from synthetic import synthetic_objective

from tuner.cli.demo import write_demo_model
from tuner.run.join import join_study
from tuner.run.options import TuneOptions
from tuner.run.prepare import open_study

ENQUEUED = 8


def _worker(kind: str, url: str, index: int, n: int, errors) -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    ctx, _ = join_study(url, "bench", worker=index)
    study = ctx.study
    if kind == "sqlite-plain":  # Optuna's RDBStorage as it comes, only a 60 s busy timeout
        storage = optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 60}})
        study = optuna.load_study(study_name="bench", storage=storage)
    study.sampler = optuna.samplers.RandomSampler(seed=index)
    objective = synthetic_objective(ctx)
    for _ in range(n):
        try:
            study.optimize(objective, n_trials=1)
        except Exception as exc:  # noqa: BLE001  count what breaks, keep going
            errors.put(f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}")


def run(kind: str, workers: int, trials: int, model: str, work: str) -> dict:
    url = f"sqlite:///{work}/{kind}-{workers}.db" if kind.startswith("sqlite") else f"journal:///{work}/{kind}-{workers}.log"
    ctx = open_study(TuneOptions.of(study="bench", model=model, storage=url, shapes=["x=8x64x256"], require="cos<=0.005"))
    for threads in range(1, ENQUEUED + 1):
        ctx.study.enqueue_trial({"precision": "fp32", "intra_op_num_threads": 1 + threads % 2,
                                 "graph_optimization_level": ["disabled", "basic", "extended", "all"][threads % 4],
                                 "intra_op_spinning": threads > 4})
    mpc = mp.get_context("spawn")
    errors = mpc.Queue()
    procs = [mpc.Process(target=_worker, args=(kind, url, i, trials // workers, errors)) for i in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    errs = []
    while not errors.empty():
        errs.append(errors.get())
    done = optuna.load_study(study_name="bench", storage=ctx.study._storage).trials
    finished = [t for t in done if t.datetime_complete]
    # from the first trial's start to the last one's end: process start-up is not the storage's cost
    wall = (max(t.datetime_complete for t in finished) - min(t.datetime_start for t in finished)).total_seconds()
    numbers = [t.number for t in done]
    states = {}
    for t in done:
        states[t.state.name] = states.get(t.state.name, 0) + 1
    return {"kind": kind, "workers": workers, "wall_s": wall, "trials": len(done), "states": states,
            "unique_numbers": len(set(numbers)) == len(numbers), "errors": errs,
            "enqueued_ran": sum(1 for t in done if t.number < ENQUEUED and t.state.name == "COMPLETE"),
            "trials_per_s": states.get("COMPLETE", 0) / wall}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4], help="worker counts (default 1 2 4)")
    ap.add_argument("--trials", type=int, default=60, help="trials per run, split over the workers (default 60)")
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="bench-storage-")
    model = write_demo_model(os.path.join(work, "demo.onnx"))
    print(f"{'storage':12s} {'workers':>7s} {'trials/s':>9s} {'wall s':>7s}  complete  enqueued-once  errors")
    for workers in args.workers:
        for kind in ("sqlite", "sqlite-plain", "journal"):
            r = run(kind, workers, args.trials, model, work)
            print(f"{kind:12s} {workers:7d} {r['trials_per_s']:9.2f} {r['wall_s']:7.1f}  "
                  f"{r['states'].get('COMPLETE', 0):8d}  {str(r['enqueued_ran'] == ENQUEUED and r['unique_numbers']):13s}  "
                  f"{len(r['errors'])} {r['errors'][:1]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
