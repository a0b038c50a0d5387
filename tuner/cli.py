"""The `tuner` command line."""
from __future__ import annotations

import argparse
import json
import re
import sys

from .errors import UserError


def parse_duration(text: str) -> float:
    """'90', '90s', '30m', '2h', '1h30m' -> seconds."""
    m = re.fullmatch(r"\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?\s*", text or "")
    if not text or not m or not any(m.groups()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration; write e.g. 90s, 30m, 2h or 1h30m")
    h, mi, se = (float(g) if g else 0.0 for g in m.groups())
    return h * 3600 + mi * 60 + se


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: needs a whole number of at least 1")
    return int(text)


def _add_problem_args(p: argparse.ArgumentParser, model_optional: bool = False) -> None:
    if model_optional:
        p.add_argument("model", nargs="?", help="path of the .onnx model (needed to create a study; a resume takes the stored one)")
    else:
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


def _tune_options(args):
    from .measure.latency import LatencyProtocol
    from .study import TuneOptions

    return TuneOptions(
        study=args.study, model=args.model, storage=args.storage, space=args.space, data=args.data,
        calib_data=args.calib_data, shapes=args.shape, int_ranges=args.int_range, require=args.require,
        objectives=args.objectives, sampler=args.sampler, seed=args.seed, n_trials=args.n_trials, max_trials=args.max_trials,
        timeout=args.timeout, enqueue=args.enqueue or [], force=args.force, trial_timeout=args.trial_timeout, jobs=args.jobs,
        stop_after_no_improvement=args.stop_after_no_improvement, top_k=args.top_k, select=not args.no_select,
        quiet=args.quiet, keep_engines=args.keep_engines, engines_dir=args.engines_dir,
        protocol=LatencyProtocol(max_seconds=args.max_timing_s) if args.max_timing_s else None)


def cmd_tune(args) -> int:
    from .tune import describe_result, tune

    result = tune(_tune_options(args))
    print(f"study {args.study}: {result.trials_run} trials run, {len(result.study.trials)} in the study")
    for line in describe_result(result):
        print(line)
    return 0


def cmd_select(args) -> int:
    from .api import load_study, study_problem
    from .select import select_winner
    from .tune import TuneResult, describe_result

    study = load_study(args.study, args.storage)
    winner = select_winner(study, study_problem(study), args.top_k)
    for line in describe_result(TuneResult(study, winner, 0)):
        print(line)
    return 0


def cmd_export(args) -> int:
    from .api import export

    rep = export(args.study, args.out, args.storage, args.best_effort)
    speed = f", {rep['speedup_vs_baseline']:.2f}x the baseline" if rep.get("speedup_vs_baseline") else ""
    print(f"{rep['kind']} (trial {rep['trial']}) written to {args.out}: engine/, config.json, report.json{speed}; "
          f"requirement {rep['requirement'] or 'none'} {'holds' if rep['meets_requirement'] else 'is NOT met'} on the rebuilt engine")
    if not rep["rebuilt_matches_stored"]:
        print("warning: the rebuilt engine's error differs from the stored one by more than 5%", file=sys.stderr)
    return 0


def cmd_status(args) -> int:
    from .api import load_study
    from .inspect_study import status_lines
    from .storage import default_url
    from .study import TuneOptions, engines_dir

    study = load_study(args.study, args.storage)
    url = args.storage or default_url(args.study)
    for line in status_lines(study, url, engines_dir(TuneOptions(study=args.study, storage=args.storage))):
        print(line)
    return 0


def cmd_studies(args) -> int:
    from .inspect_study import studies_rows
    from .storage import local_storage_urls, open_storage

    urls = [args.storage] if args.storage else local_storage_urls()
    rows = [r for url in urls for r in studies_rows(url, open_storage(url))]
    print("\n".join(rows) if rows else "no studies" + ("" if args.storage else " under studies/ (give --storage URL for others)"))
    return 0


def cmd_demo(args) -> int:
    import os

    from .demo import write_demo_model
    from .measure.latency import LatencyProtocol
    from .select import export_winner
    from .study import TuneOptions
    from .tune import describe_result, tune

    os.makedirs(args.dir, exist_ok=True)
    model = write_demo_model(os.path.join(args.dir, "demo.onnx"), outliers=2)
    print(f"demo model (4 blocks, 2 with planted outlier features): {model}")
    storage = f"sqlite:///{os.path.join(args.dir, 'demo.db')}"
    opts = TuneOptions(study="demo", model=model, storage=storage, shapes=["x=8x64x256"], require="cos<=0.005",
                       n_trials=args.n_trials, seed=0, quiet=args.quiet, protocol=LatencyProtocol(max_seconds=3),
                       force=True)
    result = tune(opts)
    for line in describe_result(result):
        print(line)
    out = os.path.join(args.dir, "winner")
    from .api import study_problem

    rep = export_winner(result.study, study_problem(result.study), out, best_effort=result.winner is None)
    print(f"exported the {rep['kind']} to {out}/ (engine/, config.json, report.json)")
    from .report import write_report

    page = write_report(result.study, os.path.join(args.dir, "report.html"), storage)
    print(f"report: {page}  (Pareto front, history, importances, per-layer map)")
    print(f"study: {storage}  (tuner status --study demo --storage {storage})")
    return 0


def cmd_sensitivity(args) -> int:
    import dataclasses
    import os

    from .evaluate import load_problem
    from .sensitivity import analyze, greedy_float_set, quantizing_override, write_table
    from .space import parse_set

    problem = load_problem(args.model, args.space, args.data, args.calib_data, args.shape, args.int_range, args.require)
    override = quantizing_override(problem, args.route)
    if args.groups:
        override = dataclasses.replace(override, granularity="group", group_pattern=args.groups)
    route = {"precision": args.route} | parse_set(args.set, problem.space)
    progress = (lambda msg: print(f"\r{msg:70s}", end="", file=sys.stderr, flush=True)) if sys.stderr.isatty() else (lambda m: None)
    table = analyze(problem, route, override, progress)
    print(f"\rsensitivity of {args.route} ({table['metric']}), {len(table['entries'])} candidates, "
          f"everything quantized: {table['error_all_quantized']:.4g}{' (cached)' if table['cached'] else ''}")
    print(f"{'rank':>4s}  {'candidate':40s} {'only it quantized':>17s} {'all but it':>11s} {'fp32 share':>10s} {'gain ms':>8s}")
    for i, e in enumerate(table["entries"][: args.limit], 1):
        print(f"{i:4d}  {e['name'][:40]:40s} {e['error_only']:17.4g} {e['error_all_but']:11.4g} "
              f"{100 * e['latency_share']:9.1f}% {e['gain_ms']:8.2f}")
    if args.greedy:
        kept, builds = greedy_float_set(problem, route, table, progress)
        print("\rgreedy float set: " + (f"{kept} ({builds} builds)" if kept is not None else
                                        f"none: the requirement fails even with every candidate in float ({builds} builds)"))
    prefix = args.out or f"sensitivity-{os.path.splitext(os.path.basename(args.model))[0]}"
    paths = write_table(table, prefix)
    if args.html:
        from .figures import sensitivity_figure

        paths.append(f"{prefix}.html")
        sensitivity_figure(table).write_html(paths[-1], include_plotlyjs=True)
    print("written: " + ", ".join(paths))
    return 0


def _add_study_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--study", required=True, help="study name")
    p.add_argument("--storage", help="storage URL (default sqlite:///studies/NAME.db; journal:///FILE.log; postgresql+psycopg://...)")


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
    p = sub.add_parser("tune", help="run or resume a study: search for the fastest engine that meets the requirement")
    _add_problem_args(p, model_optional=True)
    _add_study_args(p)
    p.add_argument("--n-trials", type=int, help="trials to run in this call")
    p.add_argument("--max-trials", type=_positive_int, metavar="N",
                   help="study-wide budget, stored in the study: every `tuner worker` stops once N trials finished")
    p.add_argument("--timeout", type=parse_duration, help="stop starting trials after this long, e.g. 2h, 30m")
    p.add_argument("--objectives", help="latency,error (default: a Pareto front) or latency")
    p.add_argument("--sampler", help="tpe (default), nsga2, gp, random or grid")
    p.add_argument("--seed", type=int, help="sampler seed")
    p.add_argument("--enqueue", action="append", help="a known config to try early, e.g. precision=int8-dynamic,dyn_per_channel=true (repeatable)")
    p.add_argument("--force", action="store_true", help="accept changed settings (model, space, data, requirement) for an existing study")
    p.add_argument("--trial-timeout", type=parse_duration, default=600.0, help="time limit of one trial's build and measurement (default 600 s)")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="worker processes on this study (default 1): builds run in parallel, timing one at a time")
    p.add_argument("--stop-after-no-improvement", type=int, metavar="N", help="stop after N trials without a better feasible latency")
    p.add_argument("--top-k", type=int, default=3, help="candidates re-timed side by side to pick the winner (default 3)")
    p.add_argument("--no-select", action="store_true", help="skip the winner selection at the end")
    p.add_argument("--max-timing-s", type=float, help="cap on one candidate's timing, seconds (default 10)")
    p.add_argument("--keep-engines", action="store_true", help="keep every trial's engine on disk (default: none kept; export rebuilds)")
    p.add_argument("--engines-dir", help="where trial engines are built (default next to the study database)")
    p.add_argument("--quiet", action="store_true", help="no live display: one log line per trial")
    p.set_defaults(func=cmd_tune)
    p = sub.add_parser("select", help="re-time the top feasible trials side by side and store the confirmed winner")
    _add_study_args(p)
    p.add_argument("--top-k", type=int, default=3, help="candidates to compare (default 3)")
    p.set_defaults(func=cmd_select)
    p = sub.add_parser("export", help="write the winner: engine, config.json, report.json")
    _add_study_args(p)
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--best-effort", action="store_true", help="with no feasible trial, export the closest candidate")
    p.set_defaults(func=cmd_export)
    p = sub.add_parser("status", help="trials by state, best feasible, winner, Pareto set, disk use")
    _add_study_args(p)
    p.set_defaults(func=cmd_status)
    p = sub.add_parser("studies", help="list the studies of a storage (default: studies/*.db)")
    p.add_argument("--storage", help="storage URL")
    p.set_defaults(func=cmd_studies)
    p = sub.add_parser("demo", help="write the demo model, tune it, select and export the winner, write the report")
    p.add_argument("--dir", default="tuner-demo", help="where the model, study and winner go (default tuner-demo)")
    p.add_argument("--n-trials", type=int, default=30, help="trials (default 30, a few minutes on 2 cores)")
    p.add_argument("--quiet", action="store_true", help="no live display: one log line per trial")
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("sensitivity", help="rank the per-layer candidates of a quantizing route by the error they cause")
    _add_problem_args(p)
    p.add_argument("--route", default="int8-dynamic", help="quantizing route (default int8-dynamic; int8-static, int4-weight)")
    p.add_argument("--set", action="append", help="route option, e.g. dyn_per_channel=true (repeatable)")
    p.add_argument("--groups", metavar="PATTERN", help="rank groups of nodes by a regex with one capture group, e.g. '^(block\\d+)/'")
    p.add_argument("--greedy", action="store_true", help="also run the greedy pass: the smallest float set that meets --require")
    p.add_argument("--limit", type=int, default=30, help="rows to print (default 30; the files have all)")
    p.add_argument("--out", metavar="PREFIX", help="write PREFIX.csv and PREFIX.json (default sensitivity-MODEL)")
    p.add_argument("--html", action="store_true", help="also write PREFIX.html, a bar chart of the ranking")
    p.set_defaults(func=cmd_sensitivity)
    from .report import register as register_report

    register_report(sub)
    from .cluster import register as register_cluster

    register_cluster(sub)  # worker, migrate
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
