"""What each `tuner` command does and prints (the parser is in cli.py)."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys

from ..analysis.quantizing import quantizing_override, route_config
from ..analysis.sensitivity import float_set, sensitivity_table
from ..analysis.variants import carried_settings, choose, measure_variants, variant_setups
from ..api import study_problem
from ..errors import TrialFailure, UserError
from ..execute.jobs import Evaluator
from ..inputs.attention import attention_softmaxes, may_have_attention
from ..inputs.configs import layer_candidates, parse_set
from ..inputs.model import input_specs, load_model
from ..inputs.space import group_pattern_problem, load_space
from ..inputs.user_paths import check_output_dir, check_output_file
from ..measure.latency import LatencyProtocol, steady
from ..problem.space_backends import check_backends
from ..problem.spec import config_from_sets, load_problem, print_notes
from ..report.charts import sensitivity_figure
from ..report.html import write_report
from ..report.progress import progress_printer
from ..report.sensitivity_table import sensitivity_columns, write_table
from ..report.status import status_lines, studies_rows
from ..report.variants import variant_lines
from ..report.view import StudyView
from ..run.delete import delete_study, study_files, total_bytes
from ..run.options import TuneOptions, engines_dir
from ..run.proxy import serve
from ..run.remote_worker import run_worker, worker_name
from ..run.tune import TuneResult, describe_result, tune_study
from ..search.reading import load_checked
from ..search.trials import study_outcome
from ..store.storage import local_storage_urls, migrate, open_for_reading, study_url
from ..winner.export import export_winner, shapes_line
from ..winner.export_files import MANIFEST, check_out_dir
from ..winner.select import select_winner
from ..winner.verify import verify_lines, verify_winner
from .demo import write_demo_model


def cmd_demo_model(args) -> int:
    check_output_file(args.out, "--out")
    print(write_demo_model(args.out, outliers=args.outliers))
    return 0


def cmd_space(args) -> int:
    space, notes = check_backends(load_space(args.space))
    print_notes(notes)
    model = load_model(args.model)
    nodes = [(n.name, n.op_type) for n in model.graph.node]
    print(f"inputs of {args.model}:")
    for spec in input_specs(model):
        dims = ", ".join(str(d) if isinstance(d, int) else f"{d or '?'} (dynamic)" for d in spec.shape)
        fix = (f"; give --shape {spec.name}=" + "x".join(str(d) if isinstance(d, int) else "N" for d in spec.shape)
               if spec.is_dynamic else "")
        print(f"  {spec.name:28s} {str(spec.dtype):11s} [{dims}]{fix}")
    softmaxes = attention_softmaxes(model.graph)
    if softmaxes or may_have_attention(model):  # what the route variants of a transformer are built for
        print(f"attention: {len(softmaxes)} Softmax in the scaled dot-product pattern" if softmaxes else
              "attention: a Softmax and a MatMul, in no pattern known here; the transformer variants are built anyway")
    print(f"space {space.name} ({space.path}), backend{'s' if len(space.backends) > 1 else ''} {', '.join(space.backends)}")
    for p in space.params:
        rng = p.choices if p.choices is not None else f"[{p.low}, {p.high}]"
        cond = f"  when {p.when}" if p.when else ""
        key = f"  (config key {p.key})" if p.key != p.name else ""
        print(f"  {p.name:28s} {p.type:11s} {str(rng):40s} default={p.default}{cond}{key}")
    for o in space.overrides:
        cands = layer_candidates(o, nodes)
        key = f" (config key {o.key})" if o.key != o.name else ""
        unless = f", unless {o.unless}" if o.unless else ""
        print(f"  per-layer {o.name}{key}: {len(cands)} {o.granularity} parameters over {o.op_types}, when {o.when}{unless}")
        for suffix, members in list(cands.items())[: args.limit]:
            print(f"    {o.name}/{suffix}  ({len(members)} node{'s' if len(members) > 1 else ''})")
        if len(cands) > args.limit:
            print(f"    ... {len(cands) - args.limit} more")
    return 0


def cmd_evaluate(args) -> int:
    check_output_dir(args.out, "--out")
    problem = load_problem(args.model, args.space, args.data, args.calib_data, args.shape, args.int_range, args.require,
                           ref_outputs=args.ref_outputs)
    config = config_from_sets(problem, args.set)
    print_notes(problem.notes)
    made_out = not os.path.exists(args.out)
    with Evaluator(problem.loaded) as evaluator:
        try:
            record = evaluator.measure(config, args.out)
        except TrialFailure as exc:
            if made_out:
                shutil.rmtree(args.out, ignore_errors=True)  # a failed evaluation leaves no folder behind
            raise UserError(f"the candidate failed{' during ' + exc.phase if exc.phase else ''}: {exc}") from None
    rec = record.to_dict()
    with open(os.path.join(args.out, "result.json"), "w") as f:
        json.dump(rec, f, indent=2, default=str)
    lat = rec["latency"]
    unsteady = (f"  (not converged: the runs differ, p90 is {lat['p90_ms'] / lat['p10_ms']:.1f}x p10)"
                if lat["p10_ms"] > 0 and not steady(lat["p10_ms"], lat["p90_ms"]) else "  (not converged)")
    print(f"config   {json.dumps({k: v for k, v in config.items() if k != 'keep_float'})}")
    if config.get("keep_float"):
        print(f"kept in float: {len(config['keep_float'])} nodes")
    print(f"latency  median {lat['median_ms']:.3f} ms  p10 {lat['p10_ms']:.3f}  p90 {lat['p90_ms']:.3f}  "
          f"mean {lat['mean_ms']:.3f}  std {lat['std_ms']:.3f}  n={lat['count']}  "
          f"95% CI [{lat['ci_low_ms']:.3f}, {lat['ci_high_ms']:.3f}]{'' if lat['converged'] else unsteady}")
    print(f"build    {rec['build_s']:.2f} s, engine {rec['engine_bytes'] / 1e6:.2f} MB in {rec['engine_dir']}")
    print("metrics  " + "  ".join(f"{k}={v:.4g}" for k, v in rec["metrics"].items()))
    if problem.requirement.bounds:
        print(f"requirement {problem.requirement}: {'holds' if rec['feasible'] else 'VIOLATED'}")
    return 0


def _tune_options(args) -> TuneOptions:
    return TuneOptions.of(
        args.study, model=args.model, storage=args.storage, space=args.space, data=args.data,
        calib_data=args.calib_data, shapes=args.shape, int_ranges=args.int_range, require=args.require,
        allow_metrics=args.allow_metric or [], ref_outputs=args.ref_outputs, in_flight=args.throughput,
        objectives=args.objectives, sampler=args.sampler, seed=args.seed, n_trials=args.n_trials, max_trials=args.max_trials,
        timeout=args.timeout, enqueue=args.enqueue or [], force=args.force, trial_timeout=args.trial_timeout, jobs=args.jobs,
        jobs_over_cores=args.jobs_over_cores, artifacts=args.artifacts,
        stop_after_no_improvement=args.stop_after_no_improvement, top_k=args.top_k, select=not args.no_select,
        quiet=args.quiet, keep_engines=args.keep_engines, keep_artifacts=args.keep_artifacts,
        engines_dir=args.engines_dir,
        protocol=LatencyProtocol(max_seconds=args.max_timing_s) if args.max_timing_s else None, timing=args.timing,
        when_busy=args.when_busy, sensitivity_budget=args.sensitivity_budget,
        sensitivity_method=args.sensitivity_method, warm_start=args.warm_start)


def cmd_tune(args) -> int:
    result = tune_study(_tune_options(args))
    print(f"study {args.study}: {result.trials_run} trials run, {len(result.study.trials)} in the study")
    for line in describe_result(result):
        print(line)
    return _outcome(result.study)


def _outcome(study) -> int:
    """A study that found nothing usable exits non-zero (3: every trial failed, 4: none feasible), saying why."""
    code, why = study_outcome(study)
    if why:
        print(f"tuner: {why} (exit {code})", file=sys.stderr)
    return code


def cmd_select(args) -> int:
    study = load_checked(args.study, study_url(args.study, args.storage))
    problem = study_problem(study, args.allow_metric or ())
    print_notes(problem.notes)
    try:
        winner = select_winner(study, problem, args.top_k, artifacts=args.artifacts, keep=args.keep_artifacts)
    except TrialFailure as exc:
        raise UserError(f"selecting the winner failed: {exc}") from None
    for line in describe_result(TuneResult(study, winner, 0)):
        print(line)
    return 0


def cmd_export(args) -> int:
    check_out_dir(args.out, args.force)  # before anything loads: a refusal is the only line
    study = load_checked(args.study, study_url(args.study, args.storage))
    problem = study_problem(study, args.allow_metric or ())
    print_notes(problem.notes)
    try:
        rep = export_winner(study, problem, args.out, args.best_effort, force=args.force, rebuild=args.rebuild,
                            artifacts=args.artifacts)
    except TrialFailure as exc:
        raise UserError(f"exporting the winner failed: {exc}") from None
    src = rep["engine_source"]
    how = (f"the engine as timed (artifact {src['artifact']}, sha256 checked)" if src["kind"] == "artifact"
           else "the rebuilt engine")
    speed = f", {rep['speedup_vs_baseline']:.2f}x the baseline" if rep.get("speedup_vs_baseline") else ""
    print(f"{rep['kind']} (trial {rep['trial']}) written to {args.out}: engine/, config.json, report.json, "
          f"{MANIFEST}{speed}; "
          f"requirement {rep['requirement'] or 'none'} "
          f"{'holds' if rep['meets_requirement'] else 'is NOT met'} on {how}")
    shapes = shapes_line(rep)
    if shapes:
        print(f"note: {shapes}", file=sys.stderr)
    if not rep["rebuilt_matches_stored"]:
        print(f"warning: the {'downloaded' if src['kind'] == 'artifact' else 'rebuilt'} engine's error differs from "
              "the stored one by more than 5%", file=sys.stderr)
    if rep["kind"] == "winner" and not args.no_verify:
        _verify_export(study, args.out, rep, args.allow_metric)
    return 0


def _verify_export(study, out: str, rep: dict, allow_metrics: list[str] | None) -> None:
    """tuner verify on the engine an export wrote to `out`, its figures added to the export's report.json."""
    rep["verify"] = _verify(study, os.path.join(out, "engine"), rep["backend"], allow_metrics)
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(rep, f, indent=2, default=str)


def _verify(study, engine_dir: str | None, backend: str | None, allow_metrics: list[str] | None) -> dict:
    try:
        result = verify_winner(study, study_problem(study, allow_metrics or ()), engine_dir, backend)
    except TrialFailure as exc:
        raise UserError(f"verifying the winner failed: {exc}") from None
    for line in verify_lines(result):
        print(line)
    return result


def cmd_verify(args) -> int:
    study = load_checked(args.study, study_url(args.study, args.storage))
    engine_dir, backend = None, None
    if args.engine:
        report = os.path.join(args.engine, "report.json")
        if not os.path.isfile(report):
            raise UserError(f"--engine {args.engine}: no report.json there; give the folder `tuner export --out` wrote")
        with open(report) as f:
            backend = json.load(f).get("backend", "onnxruntime")
        engine_dir = os.path.join(args.engine, "engine")
    _verify(study, engine_dir, backend, args.allow_metric)
    return 0


def cmd_status(args) -> int:
    url = study_url(args.study, args.storage)
    study = load_checked(args.study, url, reading=True)
    for line in status_lines(study, url, engines_dir(args.study, url)):
        print(line)
    return 0


def cmd_studies(args) -> int:
    urls = [args.storage] if args.storage else local_storage_urls()
    rows = [r for url in urls for r in studies_rows(url, open_for_reading(url),
                                                    lambda s, url=url: _mb(total_bytes(study_files(s, url))))]
    print("\n".join(rows) if rows else "no studies" + ("" if args.storage else " under studies/ (give --storage URL for others)"))
    return 0


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def cmd_delete(args) -> int:
    url = study_url(args.study, args.storage)
    study = load_checked(args.study, url)
    removals = study_files(study, url)
    print(f"deleting study {args.study} removes:")
    for r in removals:
        print(f"  {r.what}: {r.where}" + (f" ({_mb(r.bytes)})" if r.bytes is not None else ""))
    print(f"  {_mb(total_bytes(removals))} in all")
    if not args.yes:
        if not sys.stdin.isatty():
            raise UserError("nothing deleted: there is no terminal to ask on; add --yes to delete without asking")
        if input("delete all of this? [y/N] ").strip().lower() not in ("y", "yes"):
            print("nothing deleted")
            return 0
    delete_study(study, url, removals)
    print(f"deleted study {args.study}")
    return 0


def cmd_demo(args) -> int:
    os.makedirs(args.dir, exist_ok=True)
    model = write_demo_model(os.path.join(args.dir, "demo.onnx"), outliers=2)
    print(f"demo model (4 blocks, 2 with planted outlier features): {model}")
    storage = f"sqlite:///{os.path.join(args.dir, 'demo.db')}"
    opts = TuneOptions.of("demo", model=model, storage=storage, shapes=["x=8x64x256"], require="cos<=0.005",
                          n_trials=args.n_trials, seed=0, quiet=args.quiet, protocol=LatencyProtocol(max_seconds=3),
                          force=True)
    result = tune_study(opts)
    for line in describe_result(result):
        print(line)
    out = os.path.join(args.dir, "winner")
    rep = export_winner(result.study, study_problem(result.study), out, best_effort=result.winner is None, force=True)
    print(f"exported the {rep['kind']} to {out}/ (engine/, config.json, report.json)")
    if rep["kind"] == "winner":  # the exported engine re-timed as a user would: paired, then each alone
        _verify_export(result.study, out, rep, None)
    page = write_report(result.study, os.path.join(args.dir, "report.html"), storage)
    print(f"report: {page}  (Pareto front, history, importances, per-layer map)")
    print(f"study: {storage}  (tuner status --study demo --storage {storage})")
    return 0


def _sensitivity_variant(problem, route: dict, override, values: dict, evaluator, progress) -> tuple[dict, dict, list]:
    """The route variants of `tuner sensitivity`, printed: (the chosen variant's config, what its builds
    measured already, the rows). A route none of whose variants builds is refused."""
    setups = variant_setups(problem, override, route["precision"], route.get("backend"), values)
    measured = measure_variants(problem, setups, evaluator, progress)
    rows, pick = measured["rows"], choose(measured["rows"])
    for i, row in enumerate(rows):
        row["chosen"] = i == pick
    shown = {"variants": rows, "route": route, "backend": problem.backend_name(route), "fp32_ms": measured["fp32_ms"],
             "metric": problem.requirement.primary_metric,
             "settings": carried_settings(setups, problem)}
    print("\r" + "\n".join(variant_lines(override.name, shown, outcome=False)))
    if pick is None:
        failed = [r["failed"] for r in rows if "failed" in r]
        raise UserError(f"route {' '.join(route[k] for k in ('backend', 'precision') if k in route)} does not build on "
                        f"this model: {failed[0] if failed else 'no variant lets a layer stay in float'}")
    config = {k: v for k, v in setups[pick]["config"].items() if k != override.key}
    return config, {"error_all_quantized": rows[pick]["error"]}, rows


def cmd_sensitivity(args) -> int:
    problem = load_problem(args.model, args.space, args.data, args.calib_data, args.shape, args.int_range, args.require,
                           ref_outputs=args.ref_outputs)
    values = parse_set(args.set, problem.space)
    route = route_config(problem, args.route, args.backend, values)
    override = quantizing_override(problem, route["precision"], route.get("backend"))
    if args.groups:
        why = group_pattern_problem(args.groups)
        if why:
            raise UserError(f"--groups: {why}")
        override = dataclasses.replace(override, granularity="group", group_pattern=args.groups)
    print_notes(problem.notes)
    progress = progress_printer(quiet=False, log_lines=False)
    with Evaluator(problem.loaded, persistent=True) as evaluator:
        rows, known = None, None
        if not args.no_variants:
            route, known, rows = _sensitivity_variant(problem, route, override, values, evaluator, progress)
        table = sensitivity_table(problem, route, override, evaluator, args.method, progress, args.budget or None, known)
        if rows is not None:
            table = table | {"variants": rows}
        everything = table["error_all_quantized"] if table["error_all_quantized"] is not None else (known or {}).get(
            "error_all_quantized")
        print(f"\rsensitivity of {' '.join(route[k] for k in ('backend', 'precision') if k in route)} ({table['metric']}, "
              f"method {table['method']}), {len(table['entries'])} candidates"
              + (f", everything quantized: {everything:.4g}" if everything is not None else "")
              + (" (cached)" if table["cached"] else "") + ("; ranked for the chosen variant" if rows else ""))
        only, all_but = sensitivity_columns(table["method"])
        print(f"{'rank':>4s}  {'candidate':40s} {only:>17s} {all_but:>11s} {'fp32 share':>10s} {'gain ms':>8s}")
        for i, e in enumerate(table["entries"][: args.limit], 1):
            print(f"{i:4d}  {e['name'][:40]:40s} {e['error_only']:17.4g} {e['error_all_but']:11.4g} "
                  f"{100 * e['latency_share']:9.1f}% {e['gain_ms']:8.2f}")
        if args.greedy:
            kept, builds = float_set(problem, route, table, evaluator, progress)
            print("\rgreedy float set: " + (f"{kept} ({builds} builds)" if kept is not None else
                                            f"none: the requirement fails even with every candidate in float ({builds} builds)"))
    prefix = args.out or f"sensitivity-{os.path.splitext(os.path.basename(args.model))[0]}"
    paths = write_table(table, prefix)
    if args.html:
        paths.append(f"{prefix}.html")
        sensitivity_figure(table).write_html(paths[-1], include_plotlyjs=True)
    print("written: " + ", ".join(paths))
    return 0


def cmd_worker(args) -> int:
    rep = run_worker(args.storage, args.study, args.n_trials, args.timeout, args.model, args.data, args.space,
                     args.calib_data, args.allow_other_machine, args.trial_timeout,
                     LatencyProtocol(max_seconds=args.max_timing_s) if args.max_timing_s else None, args.quiet,
                     keep_engines=args.keep_engines, when_busy=args.when_busy, allow_metrics=args.allow_metric,
                     ref_outputs=args.ref_outputs)
    budget = f" of the study's budget {rep['max_trials']}" if rep["max_trials"] else ""
    print(f"worker {worker_name()} (machine {rep['machine']}{', not the study machine' if rep['other_machine'] else ''}): "
          f"{rep['ran']} trials run; study: {rep['finished']} finished{budget}, {rep['running']} running")
    return _outcome(load_checked(args.study, args.storage, reading=True))


def cmd_migrate(args) -> int:
    for name, n in migrate(args.from_url, args.to_url, args.study):
        print(f"copied study {name}: {n} trials, with their attrs and constraints, to {args.to_url}")
    return 0


def cmd_report(args) -> int:
    url = study_url(args.study, args.storage)
    view = StudyView.of(load_checked(args.study, url, reading=True))
    write_report(view, args.out, url)
    print(f"report of study {args.study} ({len(view.trials)} trials, {len(view.feasible)} feasible) written to {args.out}")
    return 0


def cmd_proxy(args) -> int:
    serve(args.storage, args.host, args.port)
    print("tuner proxy: stopped")
    return 0
