"""Benchmark of a tuning study on the demo model (issue 3). Prints figures; asserts nothing.

  python bench/study_bench.py demo --n-trials 30      # winner speedup, trials to within 3% of the best
  python bench/study_bench.py overhead --n-trials 400 # sampler + storage cost per trial, no builds

`overhead` runs the real sampler (TPE, multivariate, grouped) over the real space of the demo model
(session options, routes and one keep-float boolean per MatMul) on a real SQLite file, with an
objective that stores the same user attrs as a real trial but builds nothing, so what it times is
what the study costs on top of the builds.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import optuna
from synthetic import synthetic_objective

from tuner.cli.demo import write_demo_model
from tuner.inputs.configs import layer_candidates
from tuner.measure.latency import LatencyProtocol
from tuner.run.options import TuneOptions
from tuner.run.prepare import open_study
from tuner.run.tune import tune_study
from tuner.search.enqueue import enqueue_initial
from tuner.search.trials import baseline_trial, is_feasible, latency_of


def trials_to_within(study: optuna.Study, fraction: float = 0.03) -> tuple[int | None, float | None]:
    """First trial count whose best feasible latency is within `fraction` of the study's final best."""
    done = sorted((t for t in study.trials if is_feasible(t)), key=lambda t: t.number)
    if not done:
        return None, None
    best = min(latency_of(t) for t in done)
    running = float("inf")
    for t in done:
        running = min(running, latency_of(t))
        if running <= best * (1 + fraction):
            return t.number + 1, best
    return None, best


def bench_demo(args) -> None:
    work = tempfile.mkdtemp(prefix="bench-demo-")
    model = write_demo_model(os.path.join(work, "demo.onnx"), outliers=2)
    opts = TuneOptions.of(study="bench", model=model, storage=f"sqlite:///{work}/bench.db", shapes=["x=8x64x256"],
                       require="cos<=0.005", n_trials=args.n_trials, seed=args.seed, quiet=True, progress=False,
                       protocol=LatencyProtocol(max_seconds=3))
    t0 = time.perf_counter()
    result = tune_study(opts)
    wall = time.perf_counter() - t0
    study = result.study
    base = baseline_trial(study)
    n_within, best = trials_to_within(study)
    print(f"demo model, cos<=0.005, {args.n_trials} trials, seed {args.seed}: {wall:.0f} s wall")
    print(f"  baseline (ORT defaults, fp32): {latency_of(base):.2f} ms in the search")
    print(f"  best feasible in the search: {best:.2f} ms ({latency_of(base) / best:.2f}x); "
          f"within 3% of it after {n_within} trials")
    w = result.winner
    if w:
        print(f"  winner after interleaved re-timing: trial {w['trial']} ({w['config'].get('precision')}), "
              f"{w['confirmed_latency']['median_ms']:.2f} ms vs baseline {w['baseline_latency']['median_ms']:.2f} ms "
              f"-> {w['speedup']:.2f}x, cos {w['confirmed_metrics']['cos']:.4f}")
    else:
        print("  no feasible winner")
    states = {}
    for t in study.trials:
        states[t.state.name] = states.get(t.state.name, 0) + 1
    print(f"  trials by state: {states}; feasible {sum(is_feasible(t) for t in study.trials)}")


def _time_sampler(sampler) -> list[float]:
    """Wrap the sampler's methods to add up the seconds spent in them."""
    spent = [0.0]
    for name in ("infer_relative_search_space", "sample_relative", "sample_independent"):
        original = getattr(sampler, name)

        def timed(*a, _original=original, **kw):
            t = time.perf_counter()
            try:
                return _original(*a, **kw)
            finally:
                spent[0] += time.perf_counter() - t

        setattr(sampler, name, timed)
    return spent


def bench_overhead(args) -> None:
    work = tempfile.mkdtemp(prefix="bench-overhead-")
    model = write_demo_model(os.path.join(work, "demo.onnx"))
    opts = TuneOptions.of(study="overhead", model=model, storage=f"sqlite:///{work}/o.db", shapes=["x=8x64x256"],
                       require="cos<=0.005", seed=args.seed, quiet=True)
    ctx = open_study(opts)
    enqueue_initial(ctx, [])
    problem = ctx.problem
    n_bool = sum(len(layer_candidates(o, problem.graph_nodes)) for o in problem.space.overrides)
    sampler_s = _time_sampler(ctx.study.sampler)
    stamps: list[float] = []

    objective = synthetic_objective(ctx)

    def stamp(study, trial):
        stamps.append(time.perf_counter())

    t0 = time.perf_counter()
    ctx.study.optimize(objective, n_trials=args.n_trials, callbacks=[stamp])
    per_trial = [b - a for a, b in zip([t0] + stamps[:-1], stamps)]
    print(f"sampler + SQLite storage overhead per trial, TPE(multivariate, group), demo space "
          f"({len(problem.space.params)} params + {n_bool} per-layer booleans), {args.n_trials} trials:")
    for lo in range(0, args.n_trials, 100):
        window = per_trial[lo:lo + 100]
        if window:
            print(f"  trials {lo:4d}-{lo + len(window) - 1:4d}: median {1000 * statistics.median(window):7.1f} ms, "
                  f"max {1000 * max(window):7.1f} ms")
    total = stamps[-1] - t0
    print(f"  sampler {sampler_s[0]:.1f} s of {total:.1f} s ({100 * sampler_s[0] / total:.0f}%); the rest is storage "
          f"and the objective's bookkeeping")
    print(f"  total {total:.1f} s; database {os.path.getsize(f'{work}/o.db') / 1e6:.1f} MB")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", choices=["demo", "overhead"], help="what to measure")
    ap.add_argument("--n-trials", type=int, default=None, help="trials (default 30 for demo, 400 for overhead)")
    ap.add_argument("--seed", type=int, default=0, help="sampler seed (default 0)")
    args = ap.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    if args.part == "demo":
        args.n_trials = args.n_trials or 30
        bench_demo(args)
    else:
        args.n_trials = args.n_trials or 400
        bench_overhead(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
