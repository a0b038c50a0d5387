"""Paired against lone timing: what pairing costs per trial and what it does to rank stability (issue 21).

  python bench/paired_bench.py [--model M.onnx --shape x=... | --data D.npz] [--reps 3] [--load]

A handful of configs of the default space, each measured --reps times as a trial is (an isolated
child, the default protocol), once timed alone and once paired with the baseline. The reference
ranking is all of them timed side by side for a long time in one process. Printed per mode: the
median seconds a measurement takes, Spearman's correlation of each repetition's ranking with the
reference, and the spread of each config's score over repetitions (max/min). With --load, a CPU
burner runs on one core during the repetitions (not during the reference): the case pairing is for.
Asserts nothing.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tuner.cli.demo import write_demo_model  # noqa: E402
from tuner.execute.jobs import Evaluator  # noqa: E402
from tuner.problem.spec import config_from_sets, load_problem  # noqa: E402

CONFIGS = {  # label -> --set values; the first is the baseline (ORT defaults)
    "defaults": [],
    "1 thread": ["intra_op_num_threads=1"],
    "no spinning": ["intra_op_spinning=false"],
    "basic graph opts": ["graph_optimization_level=basic"],
    "int8-dynamic": ["precision=int8-dynamic"],
    "int8 per-channel": ["precision=int8-dynamic", "dyn_per_channel=true"],
    "fp16": ["precision=fp16"],
}


def _burn(stop) -> None:
    while not stop.is_set():
        pass


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--data")
    ap.add_argument("--shape", action="append")
    ap.add_argument("--int-range", action="append")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--load", action="store_true", help="a CPU burner on one core during the repetitions")
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="bench-paired-")
    os.environ.setdefault("TUNER_CACHE", os.path.join(work, "cache"))
    if not args.model:
        args.model, args.shape = write_demo_model(os.path.join(work, "demo.onnx"), outliers=2), ["x=8x64x256"]
    problem = load_problem(args.model, data=args.data, shapes=args.shape, int_ranges=args.int_range)
    configs = {k: config_from_sets(problem, v) for k, v in CONFIGS.items()}
    base = configs["defaults"]
    with Evaluator(problem.spec, timeout_s=3600) as ev:
        ref = ev.confirm(list(configs.values()), baseline=0, rounds=60).finalists
    reference = [r.relative.ratio for r in ref]
    stop = mp.get_context("spawn").Event()
    burner = mp.get_context("spawn").Process(target=_burn, args=(stop,)) if args.load else None
    if burner:
        burner.start()
    scores: dict[str, list[list[float]]] = {"alone": [], "paired": []}
    seconds: dict[str, list[float]] = {"alone": [], "paired": []}
    try:
        for rep in range(args.reps):
            for mode in ("alone", "paired"):
                ev = Evaluator(problem.spec, timeout_s=600, baseline=base if mode == "paired" else None)
                row = []
                for _label, cfg in configs.items():
                    t0 = time.perf_counter()
                    rec = ev.measure(cfg, os.path.join(work, f"{mode}-{rep}-{len(row)}"))
                    seconds[mode].append(time.perf_counter() - t0)
                    row.append(rec.relative_latency if mode == "paired" else rec.median_ms)
                scores[mode].append(row)
                print(f"rep {rep} {mode}: {[round(x, 3) for x in row]}", file=sys.stderr, flush=True)
    finally:
        if burner:
            stop.set()
            burner.join(10)
    print(f"\nmodel {os.path.basename(args.model)}, {len(configs)} configs, {args.reps} repetitions"
          f"{', a CPU burner on one core during them' if args.load else ''}")
    print("reference (side by side, 60 rounds), relative to the defaults: "
          + ", ".join(f"{k} {r:.3f}" for k, r in zip(configs, reference)) + "\n")
    print("| timing | seconds per measurement (median) | Spearman with the reference, per repetition | "
          "score spread over repetitions (max/min, median over configs) |\n|---|---|---|---|")
    for mode in ("alone", "paired"):
        rho = [spearman(row, reference) for row in scores[mode]]
        spread = statistics.median(max(c) / min(c) for c in zip(*scores[mode]))
        print(f"| {mode} | {statistics.median(seconds[mode]):.1f} | {', '.join(f'{r:.2f}' for r in rho)} | {spread:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
