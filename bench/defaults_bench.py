"""The default study against the all-int8 ceiling (issue 21).

  python bench/defaults_bench.py --model bench/models/minilm-L3.onnx --data bench/models/minilm-inputs.npz \\
      --require 'cos<=0.015' --trials 60
  python bench/defaults_bench.py --demo --trials 30          # the planted demo model, cos<=0.0005

Per strategy, one `tuner tune` study with --trials trials: `default` (--space, by default the tuner's default space
as it ships: encoding auto, so sensitivity on a model with many layers) and `independent` (the same
space with one boolean per layer, the old default). Then, in one process, side by side in blocks:
ORT defaults, the all-int8 ceiling (int8-dynamic on every MatMul/Gemm/Conv, nothing in float) and
every strategy's winner. A strategy's share of the ceiling = its speedup / the ceiling's speedup.
Last, `tuner verify` re-times the default strategy's winner in a fresh process: the agreement
between the study's claim and verify. Prints a markdown table; asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import optuna
import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tuner.cli.demo import write_demo_model  # noqa: E402
from tuner.execute.jobs import Evaluator  # noqa: E402
from tuner.inputs.space import DEFAULT_SPACE  # noqa: E402
from tuner.problem.spec import config_from_sets, load_problem  # noqa: E402
from tuner.run.options import TuneOptions  # noqa: E402
from tuner.run.tune import tune_study  # noqa: E402
from tuner.search.trials import analysis_cost, baseline_trial, was_busy  # noqa: E402
from tuner.winner.verify import verify_winner  # noqa: E402


def independent_space(work: str, base: str) -> str:
    """The space with encoding independent (one boolean per layer): the old default."""
    with open(base) as f:
        doc = yaml.safe_load(f)
    for override in doc.get("layer_overrides", {}).values():
        override["encoding"] = "independent"
    path = os.path.join(work, "independent.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(doc, f, sort_keys=False)
    return path


def run(strategy: str, args, work: str, space: str | None) -> dict:
    t0 = time.time()
    result = tune_study(TuneOptions.of(study=strategy, model=args.model, storage=f"sqlite:///{work}/{strategy}.db", space=space,
                              data=args.data, shapes=args.shape, int_ranges=args.int_range, require=args.require,
                              seed=args.seed, n_trials=args.trials, quiet=True, progress=False))
    study = result.study
    builds, seconds = analysis_cost(study.user_attrs["tuner_settings"].get("rankings"))
    trials = study.get_trials(deepcopy=False)
    return {"study": study, "winner": result.winner, "wall_s": time.time() - t0, "analysis_builds": builds,
            "analysis_s": seconds, "failed": sum(1 for t in trials if t.state.name == "FAIL"),
            "pruned": sum(1 for t in trials if t.state.name == "PRUNED"), "busy": sum(1 for t in trials if was_busy(t))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="ONNX model")
    ap.add_argument("--demo", action="store_true", help="the planted demo model (x=8x64x256, cos<=0.0005)")
    ap.add_argument("--data", help="validation .npz (real inputs)")
    ap.add_argument("--shape", action="append")
    ap.add_argument("--int-range", action="append")
    ap.add_argument("--require", default="cos<=0.005")
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--strategies", nargs="+", default=["default", "independent"])
    ap.add_argument("--space", default=DEFAULT_SPACE,
                    help="the space as it ships (default: the tuner's default here, cpu.yaml where OpenVINO is installed); "
                         "e.g. search_spaces/onnxruntime-cpu.yaml")
    args = ap.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    work = tempfile.mkdtemp(prefix="bench-defaults-")
    os.environ.setdefault("TUNER_CACHE", os.path.join(work, "cache"))
    if args.demo:
        args.model = write_demo_model(os.path.join(work, "demo.onnx"), outliers=2)
        args.shape, args.require = ["x=8x64x256"], "cos<=0.0005"
    runs = {}
    for strategy in args.strategies:
        runs[strategy] = run(strategy, args, work, args.space if strategy == "default" else independent_space(work, args.space))
        r = runs[strategy]
        print(f"{strategy}: {args.trials} trials in {r['wall_s']:.0f} s ({r['analysis_builds']} analysis builds, "
              f"{r['analysis_s']:.0f} s), failed {r['failed']}, pruned {r['pruned']}, busy {r['busy']}",
              file=sys.stderr, flush=True)
    first = runs[args.strategies[0]]["study"]
    problem = load_problem(args.model, args.space, data=args.data, shapes=args.shape, int_ranges=args.int_range,
                           require=args.require)
    ceiling = config_from_sets(problem, ["precision=int8-dynamic"]) | {"keep_float": []}
    configs = {"ORT defaults": baseline_trial(first).user_attrs["config"], "all-int8 ceiling": ceiling}
    configs |= {f"{s} winner": r["winner"]["config"] for s, r in runs.items() if r["winner"]}
    with Evaluator(problem.spec, timeout_s=3600) as evaluator:
        final = evaluator.confirm(list(configs.values()), baseline=0, rounds=40)
    metric = problem.requirement.primary_metric
    res = dict(zip(configs, final.finalists))
    ceiling_speed = 1.0 / res["all-int8 ceiling"].relative.ratio
    print(f"\nmodel {os.path.basename(args.model)}, space {os.path.basename(args.space)}, {args.require}, "
          f"{args.trials} trials, seed {args.seed}; "
          f"re-timed side by side in one process (others used {final.load['other_cores']:.2f} cores)\n")
    print(f"| engine | speedup over ORT defaults [95%] | {metric} | share of the all-int8 ceiling | layers in float | "
          "trials + analysis builds | study wall s |\n|---|---|---|---|---|---|---|")
    for name, r in res.items():
        rel = r.relative
        speed = 1.0 / rel.ratio
        strategy = runs.get(name.replace(" winner", ""))
        kept = len(configs[name].get("keep_float", [])) if configs[name].get("precision", "fp32") != "fp32" else "-"
        work_txt = f"{args.trials} + {strategy['analysis_builds']}" if strategy else "-"
        wall = f"{strategy['wall_s']:.0f}" if strategy else "-"
        print(f"| {name} | {speed:.2f} [{1 / rel.ci_high:.2f}-{1 / rel.ci_low:.2f}] | {r.rebuilt.metrics[metric]:.3g}"
              f"{'' if r.feasible else ' (infeasible)'} | {speed / ceiling_speed:.2f} | {kept} | {work_txt} | {wall} |")
    default = runs.get("default")
    if default and default["winner"]:
        v = verify_winner(default["study"], problem)
        print(f"\nverify (fresh process, paired blocks): {v['speedup']:.2f}x [{v['speedup_low']:.2f}-{v['speedup_high']:.2f}]"
              f"; the study claimed {v['claimed_speedup']:.2f}x: {100 * v['difference']:+.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
