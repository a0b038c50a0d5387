"""Per-layer search strategies on the same budget (issue 9). Prints a markdown table; asserts nothing.

  python bench/sensitivity_bench.py --models planted ocr-rec --budget 60 --seeds 0

Strategies, each a real study (real builds) with route int8-dynamic and session options searched:
  independent  one boolean per MatMul/Conv (TPE)
  sensitivity  the sensitivity encoding, seeded by the greedy pass (TPE); its analysis builds are
               counted and reported separately
  fallback     Intel Neural Compressor-like: everything quantized, then one op back to fp32 at a
               time, last layer first, until the requirement holds
For each: trials until within 3% of the best feasible latency any strategy found on that model, and
the speedup over the study's own baseline (trial 0, ORT defaults) at 30 / 60 / 100 trials.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import optuna
from fetch_models import ocr_model

from tuner.cli.demo import write_demo_model
from tuner.measure.latency import LatencyProtocol
from tuner.run.options import TuneOptions
from tuner.run.prepare import open_study
from tuner.run.tune import tune_study
from tuner.search.trials import baseline_trial, is_feasible, latency_of

HERE = os.path.dirname(os.path.abspath(__file__))
SPACE = """\
name: bench-{encoding}
backend: onnxruntime
parameters:
  precision: {{type: categorical, choices: [fp32, int8-dynamic], default: fp32}}
  graph_optimization_level: {{type: categorical, choices: [basic, extended, all], default: all}}
  intra_op_num_threads: {{type: int, low: 1, high: cores, default: cores}}
  dyn_per_channel: {{type: bool, default: false, when: {{precision: [int8-dynamic]}}}}
layer_overrides:
  keep_float:
    when: {{precision: [int8-dynamic]}}
    op_types: [MatMul, Gemm, Conv]
    encoding: {encoding}
"""
MODELS = {  # name -> (shape, requirement)
    "planted": (["x=8x64x256"], "cos<=0.0005"),
    "ocr-rec": (["x=1x3x48x320"], "cos<=0.01"),
    "ocr-det": (["x=1x3x320x320"], "cos<=0.01"),
    "bert": (["input_ids=1x128"], "cos<=0.005"),
}
INT_RANGES = {"bert": ["input_ids=0:30522"]}


def model_path(name: str, work: str) -> str:
    if name == "planted":
        return write_demo_model(os.path.join(work, "planted.onnx"), outliers=2)
    if name == "bert":
        from models import bert_model

        return bert_model()
    return ocr_model(name)


def run_strategy(strategy: str, model: str, shapes, require, budget: int, seed: int, work: str,
                 int_ranges=None) -> optuna.Study:
    encoding = "sensitivity" if strategy == "sensitivity" else "independent"
    space = os.path.join(work, f"{encoding}.yaml")
    with open(space, "w") as f:
        f.write(SPACE.format(encoding=encoding))
    name = f"{strategy}-{seed}"
    opts = TuneOptions.of(study=name, model=model, storage=f"sqlite:///{work}/{name}.db", space=space, shapes=shapes,
                       int_ranges=int_ranges, require=require, seed=seed, n_trials=budget, quiet=True, progress=False,
                       select=False, protocol=LatencyProtocol(max_seconds=2))
    if strategy == "fallback":
        opts.sampler = "random"  # never used: the queue covers the budget
        opts.enqueue = fallback_configs(opts, budget)
    return tune_study(opts).study


def fallback_configs(opts: TuneOptions, budget: int) -> list[str]:
    """All quantized, then the last 1, 2, ... candidates (graph order) back in float."""
    ctx = open_study(opts)
    nodes = [n for n, op in ctx.problem.graph_nodes if op in ("MatMul", "Gemm", "Conv")]
    configs = []
    for k in range(min(budget - 1, len(nodes) + 1)):
        sets = ["precision=int8-dynamic"] + [f"keep_float/{n}=true" for n in nodes[len(nodes) - k:]]
        configs.append(",".join(sets))
    return configs


def best_at(study, n: int) -> float:
    lat = [latency_of(t) for t in study.trials[:n] if is_feasible(t)]
    return min(lat) if lat else float("inf")


def trials_to_within(study, target: float, frac: float = 0.03) -> int | None:
    for t in study.trials:
        if is_feasible(t) and latency_of(t) <= target * (1 + frac):
            return t.number + 1
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["planted"], choices=sorted(MODELS), help="models (default planted)")
    ap.add_argument("--budget", type=int, default=60, help="trials per strategy (default 60)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="sampler seeds (default 0)")
    ap.add_argument("--strategies", nargs="+", default=["independent", "sensitivity", "fallback"])
    args = ap.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    rows, raw = [], []
    for mname in args.models:
        work = tempfile.mkdtemp(prefix=f"bench-sens-{mname}-")
        os.environ.setdefault("TUNER_CACHE", os.path.join(work, "cache"))  # a cache the user named is kept
        model = model_path(mname, work)
        shapes, require = MODELS[mname]
        studies = {}
        for strategy in args.strategies:
            for seed in args.seeds if strategy != "fallback" else [0]:
                t0 = time.perf_counter()
                studies[(strategy, seed)] = run_strategy(strategy, model, shapes, require, args.budget, seed, work,
                                                           INT_RANGES.get(mname))
                print(f"{mname} {strategy} seed {seed}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        best = min(best_at(s, len(s.trials)) for s in studies.values())
        for (strategy, seed), study in studies.items():
            base = latency_of(baseline_trial(study))
            speed = {n: base / best_at(study, n) for n in (30, 60, 100) if n <= len(study.trials)}
            extra = ""
            if strategy == "sensitivity":
                r = study.user_attrs["tuner_settings"]["rankings"]["keep_float"]
                extra = f"greedy kept {r['cut']} of {len(r['order'])} in float, {r['greedy_builds']} greedy builds"
            feasible_int8 = [t for t in study.trials if is_feasible(t) and t.params.get("precision") == "int8-dynamic"]
            fewest = min((len(t.user_attrs["config"].get("keep_float", [])) for t in feasible_int8), default=None)
            row = {"model": mname, "strategy": strategy, "seed": seed, "trials": len(study.trials),
                   "to_within_3pct": trials_to_within(study, best), "speedup": speed,
                   "fewest_float_feasible_int8": fewest, "note": extra}
            raw.append(row)
            rows.append(f"| {mname} | {strategy} | {seed} | {row['to_within_3pct'] or '-'} | "
                        + " | ".join(f"{speed[n]:.2f}x" if n in speed else "-" for n in (30, 60, 100))
                        + f" | {fewest if fewest is not None else '-'} | {extra} |")
    print("| model | strategy | seed | trials to within 3% of best | speedup @30 | @60 | @100 | "
          "fewest float nodes (feasible int8) | note |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    out = os.path.join(HERE, "results", "sensitivity.json")
    with open(out, "w") as f:
        json.dump(raw, f, indent=1, default=str)
    print(f"\n{out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
