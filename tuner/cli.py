"""The `tuner` command line."""
from __future__ import annotations

import argparse
import json
import sys

from .errors import UserError


def _add_problem_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="path of the .onnx model")
    p.add_argument("--space", help="space file (YAML); default: search_spaces/onnxruntime-cpu.yaml")
    p.add_argument("--data", help=".npz with one array per input, leading axis = batches")
    p.add_argument("--calib-data", help=".npz of calibration batches (default: the first validation batches)")
    p.add_argument("--shape", action="append", help="shape of a dynamic input, e.g. input_ids=8x128 (repeatable)")
    p.add_argument("--int-range", action="append", help="value range of an integer input for synthetic data, e.g. input_ids=0:30522")
    p.add_argument("--require", action="append", help="accuracy requirement, e.g. 'cos<=0.005' (repeatable, or comma-separated)")


def cmd_demo_model(args) -> int:
    from .demo import write_demo_model

    print(write_demo_model(args.out, outliers=args.outliers))
    return 0


def cmd_space(args) -> int:
    from .model import load_model
    from .space import layer_candidates, load_space

    space = load_space(args.space)
    model = load_model(args.model)
    nodes = [(n.name, n.op_type) for n in model.graph.node]
    print(f"space {space.name} ({space.path}), backend {space.backend}")
    for p in space.params:
        rng = p.choices if p.choices is not None else f"[{p.low}, {p.high}]"
        cond = f"  when {p.when}" if p.when else ""
        print(f"  {p.name:28s} {p.type:11s} {str(rng):40s} default={p.default}{cond}")
    for o in space.overrides:
        cands = layer_candidates(o, nodes)
        print(f"  per-layer {o.name}: {len(cands)} {o.granularity} parameters over {o.op_types}, when {o.when}")
        for suffix, members in list(cands.items())[: args.limit]:
            print(f"    {o.name}/{suffix}  ({len(members)} node{'s' if len(members) > 1 else ''})")
        if len(cands) > args.limit:
            print(f"    ... {len(cands) - args.limit} more")
    return 0


def cmd_evaluate(args) -> int:
    from .evaluate import config_from_sets, evaluate_config, load_problem

    problem = load_problem(args.model, args.space, args.data, args.calib_data, args.shape, args.int_range, args.require)
    config = config_from_sets(problem, args.set)
    rec = evaluate_config(problem, config, args.out)
    with open(f"{args.out}/result.json", "w") as f:
        json.dump(rec, f, indent=2, default=str)
    lat = rec["latency"]
    print(f"config   {json.dumps({k: v for k, v in config.items() if k != 'keep_float'})}")
    if config.get("keep_float"):
        print(f"kept in float: {len(config['keep_float'])} nodes")
    print(f"latency  median {lat['median_ms']:.3f} ms  p10 {lat['p10_ms']:.3f}  p90 {lat['p90_ms']:.3f}  "
          f"mean {lat['mean_ms']:.3f}  std {lat['std_ms']:.3f}  n={lat['count']}  "
          f"95% CI [{lat['ci_low_ms']:.3f}, {lat['ci_high_ms']:.3f}]{'' if lat['converged'] else '  (not converged)'}")
    print(f"build    {rec['build_s']:.2f} s, engine {rec['engine_bytes'] / 1e6:.2f} MB in {rec['engine_dir']}")
    print("metrics  " + "  ".join(f"{k}={v:.4g}" for k, v in rec["metrics"].items()))
    if problem.requirement.bounds:
        print(f"requirement {problem.requirement}: {'holds' if rec['feasible'] else 'VIOLATED'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="tuner", description="Find the fastest engine of an ONNX model that meets its accuracy requirement.")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo-model", help="write the built-in demo transformer encoder")
    p.add_argument("--out", default="demo.onnx", help="output path (default demo.onnx)")
    p.add_argument("--outliers", type=int, default=0, help="plant outlier features in this many blocks")
    p.set_defaults(func=cmd_demo_model)
    p = sub.add_parser("space", help="print the space a model gets: parameters, defaults, per-layer parameters")
    p.add_argument("model", help="path of the .onnx model")
    p.add_argument("--space", help="space file (YAML)")
    p.add_argument("--limit", type=int, default=20, help="per-layer parameters to list (default 20)")
    p.set_defaults(func=cmd_space)
    p = sub.add_parser("evaluate", help="build one candidate engine and measure latency and accuracy")
    _add_problem_args(p)
    p.add_argument("--set", action="append", help="parameter value, e.g. precision=int8-dynamic (repeatable)")
    p.add_argument("--out", default="tuner-out", help="directory for the engine artifact (default tuner-out)")
    p.set_defaults(func=cmd_evaluate)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UserError as exc:
        print(f"tuner: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tuner: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
