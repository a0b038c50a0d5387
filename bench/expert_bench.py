"""The default study against the engine an expert builds by hand (issue 27), on this CPU.

  python bench/expert_bench.py --models minilm-sdpa ocr-rec --trials 60      # the full run (about an hour on 2 cores)
  python bench/expert_bench.py --models demo --trials 4 --rounds 5      # a smoke run, minutes

Per model, one requirement for every row, and every row a config rebuilt, checked again and timed side
by side with the others in one process (Evaluator.confirm: A B C A B C ..., in blocks):
- ORT defaults (the baseline of every speedup) and OV defaults (the ONNX file compiled with no properties:
  bf16 on a CPU with BF16, chosen without any accuracy check);
- OV all-int8: NNCF int8 on every layer with the variant an expert picks (model type TRANSFORMER where the
  graph has attention, SmoothQuant off), with the bf16 hint where the CPU has BF16;
- NNCF accuracy control by hand: `nncf.quantize_with_accuracy_control` with that variant and the requirement
  as its maximal drop, then the layers it reverted kept in float through the tuner's int8 route (NNCF's
  ignored scope), with the bf16 hint: what an expert gets with one NNCF call;
- ORT's all-int8 ceiling: int8-dynamic on every MatMul/Gemm/Conv, nothing in float;
- the default `tuner tune` (cpu.yaml, --trials trials, its selection), with the wall time of its analysis
  (the variants and the per-layer ranking, before trial 0) and of the whole study.
Every row is also timed alone, each engine in 5 fresh processes (the deployment check: what a user who
deploys it sees), and the study's anytime curve is printed: the best feasible speedup it had found after
1, 2, 3, 5, 10 ... minutes (its trials' own ratios), beside the rows of the runtimes' defaults and the
expert's engine. Prints the CPU's flags (bf16 and int8 gains depend on them). Writes
bench/results/expert-MODEL.json and expert.md. Asserts nothing. Needs the openvino and bench extras:
pip install -e ".[openvino,bench]".
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import optuna

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from backends_bench import model_inputs, side_by_side  # noqa: E402

from tuner.api import study_problem  # noqa: E402
from tuner.inputs.configs import defaults_chooser, normalize  # noqa: E402
from tuner.inputs.space import SPACES_DIR  # noqa: E402
from tuner.measure.machine import cpu_flags as _flags  # noqa: E402
from tuner.run.options import TuneOptions  # noqa: E402
from tuner.run.tune import tune_study  # noqa: E402
from tuner.search.trials import baseline_trial, is_feasible, is_trusted, speedup_of  # noqa: E402

FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "avx512_fp16")


def cpu_flags() -> frozenset[str]:
    return _flags() or frozenset()


def has_attention(model) -> bool:
    """MatMul -> ... -> Softmax -> MatMul: the graph of a transformer (NNCF's TRANSFORMER model type)."""
    return any(n.op_type == "Softmax" for n in model.proto.graph.node)


def nncf_by_hand(problem, transformer: bool) -> tuple[list[str], dict]:
    """nncf.quantize_with_accuracy_control with the expert's variant; returns the ONNX MatMul/Gemm/Conv
    nodes it left in float, and what the call cost."""
    import nncf
    import openvino as ov
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, AdvancedSmoothQuantParameters

    from tuner.backends.openvino.quantize import read_model
    from tuner.execute.evaluate import ensure_reference
    from tuner.measure.accuracy import compute_metrics

    core = ov.Core()
    model = read_model(core, problem.model_path, problem.shapes)
    batches, refs = problem.batches, ensure_reference(problem)
    primary, limit = problem.requirement.primary_metric, problem.requirement.bounds[0].limit
    validations = [0]
    names = [o.name for o in problem.model.proto.graph.output]  # the compiled model's outputs, in this order

    def score(compiled, items) -> float:  # higher is better for NNCF: minus the requirement's metric
        validations[0] += 1
        outs = [dict(zip(names, (np.asarray(v) for v in compiled(batches[i]).values()))) for i in items]
        return -compute_metrics(outs, [refs[i] for i in items])[0][primary]

    advanced = AdvancedQuantizationParameters()
    if transformer:
        advanced.smooth_quant_alphas = AdvancedSmoothQuantParameters(convolution=-1, matmul=-1)
    data = nncf.Dataset(list(range(len(batches))), lambda i: batches[i])
    t0 = time.perf_counter()
    quantized = nncf.quantize_with_accuracy_control(
        model, data, data, score, max_drop=limit, drop_type=nncf.DropType.ABSOLUTE, subset_size=len(batches),
        model_type=nncf.ModelType.TRANSFORMER if transformer else None,
        advanced_quantization_parameters=advanced)
    seconds = time.perf_counter() - t0
    heavy = {n.name for n in problem.model.proto.graph.node if n.op_type in ("MatMul", "Gemm", "Conv")}
    quantized_inputs = set()
    for op in quantized.get_ops():
        if op.get_friendly_name() in heavy and any(
                i.get_source_output().get_node().get_type_name() == "FakeQuantize" for i in op.inputs()):
            quantized_inputs.add(op.get_friendly_name())
    # what NNCF's all-int8 quantizes and accuracy control reverted (nodes NNCF never quantizes stay out)
    all_int8 = nncf.quantize(read_model(core, problem.model_path, problem.shapes), data, subset_size=len(batches),
                             model_type=nncf.ModelType.TRANSFORMER if transformer else None,
                             advanced_parameters=advanced)
    everything = {op.get_friendly_name() for op in all_int8.get_ops() if op.get_friendly_name() in heavy and any(
        i.get_source_output().get_node().get_type_name() == "FakeQuantize" for i in op.inputs())}
    kept = sorted(everything - quantized_inputs)
    return kept, {"seconds": round(seconds, 1), "validations": validations[0], "kept_in_float": kept}


def bench_model(name: str, args) -> dict:
    work = os.path.join(args.work, name) if args.work else tempfile.mkdtemp(prefix=f"expert-{name}-")
    os.makedirs(work, exist_ok=True)
    os.environ.setdefault("TUNER_CACHE", os.path.join(work, "cache"))
    model, inputs = model_inputs(name, work)
    print(f"{name}: study in {work}", file=sys.stderr, flush=True)
    url = f"sqlite:///{work}/default.db"
    done = os.path.join(work, "default.json")  # the study's wall time, written once it ended: a rerun reuses it
    if os.path.exists(done):
        with open(done) as f:
            t0, wall = json.load(f)
        study = optuna.load_study(study_name="default", storage=url)
    else:
        t0 = time.time()
        study = tune_study(TuneOptions.of(study="default", model=model, storage=url, n_trials=args.trials, seed=args.seed,
                                 quiet=False, progress=False, space=os.path.join(SPACES_DIR, "cpu.yaml"),
                                 **inputs)).study
        wall = time.time() - t0
        with open(done, "w") as f:
            json.dump([t0, wall], f)
    problem = study_problem(study)
    starts = [t.datetime_start for t in study.trials if t.datetime_start]
    first_trial_s = min(starts).timestamp() - t0 if starts else None
    transformer = has_attention(problem.model)
    bf16 = "bf16" if "avx512_bf16" in cpu_flags() or "amx_bf16" in cpu_flags() else "f32"

    def config(**values):
        return normalize(problem.space, defaults_chooser(values), problem.graph_nodes)

    variant = {"int8_model_type": "transformer", "int8_smooth_quant": False} if transformer else {}
    kept, by_hand = nncf_by_hand(problem, transformer)
    ov_int8 = config(backend="openvino", ov_precision="int8", static_shapes=True, inference_precision=bf16, **variant)
    rows = {"ORT defaults": config(),
            "OV defaults (ONNX file, no properties)": config(backend="openvino"),
            f"OV all-int8 ({'TRANSFORMER, SmoothQuant off, ' if transformer else ''}{bf16})": ov_int8 | {"keep_float": []},
            f"NNCF accuracy control by hand ({len(kept)} kept in float, {bf16})": ov_int8 | {"keep_float": kept},
            "ORT all-int8 ceiling (int8-dynamic, nothing in float)": config(precision="int8-dynamic") | {"keep_float": []}}
    winner = study.user_attrs.get("winner")
    if winner:
        rows[f"tuner tune, default ({args.trials} trials)"] = winner["config"]
    settings = study.user_attrs.get("tuner_settings", {})
    analysis = {k: {"builds": r.get("analysis_builds"), "seconds": r.get("analysis_s"), "route": r.get("route")}
                for k, r in (settings.get("rankings") or {}).items()}
    out = {"requirement": inputs["require"], "trials": args.trials, "study_wall_s": round(wall, 1),
           "first_trial_after_s": round(first_trial_s, 1) if first_trial_s is not None else None,
           "analysis": analysis, "by_hand": by_hand, "anytime": anytime(study, t0),
           "rows": side_by_side(study, rows, args.rounds, alone=args.alone)}
    with open(os.path.join(args.out, f"expert-{name}.json"), "w") as f:
        json.dump(out, f, indent=1, default=str)
    return out


MARKS_MIN = (1, 2, 3, 5, 10, 15, 20, 30, 45, 60)


def anytime(study, t0: float) -> dict:
    """The best feasible speedup over the baseline the study had found after each mark (its trials' own
    ratios, the paired figures the search ranked by), and when it found its best."""
    base = baseline_trial(study)
    points = []  # (seconds since the study started, speedup of a feasible trusted trial)
    for t in study.trials:
        if t.datetime_complete and is_feasible(t) and is_trusted(t) and base is not None:
            up = speedup_of(t, base)
            if up:
                points.append((t.datetime_complete.timestamp() - t0, up))
    points.sort()
    best_at = max(points, key=lambda p: p[1])[0] if points else None
    marks = {m: max((up for s, up in points if s <= 60 * m), default=None) for m in MARKS_MIN
             if not points or 60 * m <= points[-1][0] + 60}
    return {"marks": marks, "best_found_after_s": round(best_at, 1) if best_at is not None else None}


def write_table(results: dict, out: str) -> str:
    flags = sorted(set(FLAGS) & set(cpu_flags()))
    lines = [f"CPU flags: {' '.join(flags) or 'none of ' + ' '.join(FLAGS)}", "",
             "| model | requirement | engine | speed over ORT defaults, side by side [95%] | alone | error | meets |"
             " kept in float |", "|---|---|---|---|---|---|---|---|"]
    for model, res in results.items():
        for label, r in res["rows"].items():
            ci = f" [{r['speedup_ci'][0]:.2f}-{r['speedup_ci'][1]:.2f}]" if r.get("speedup_ci") else ""
            speed = f"{r['speedup']:.2f}x{ci}" if r.get("speedup") else f"failed: {r.get('failed')}"
            err = f"{r['error']:.2g}" if r.get("error") is not None else "-"
            alone = f"{r['alone_speedup']:.2f}x" if r.get("alone_speedup") else "-"
            lines.append(f"| {model} | {res['requirement']} | {label} | {speed} | {alone} | {err} | "
                         f"{'yes' if r.get('feasible') else 'no'} | {len(r['config'].get('keep_float', []))} |")
    lines += ["", "| model | study wall time | first trial after | analysis (builds, s) | best found after |"
              " NNCF by hand (s, validations) |", "|---|---|---|---|---|---|"]
    for model, res in results.items():
        analysis = "; ".join(f"{k}: {v['builds']}, {v['seconds']}" for k, v in res["analysis"].items()) or "-"
        lines.append(f"| {model} | {res['study_wall_s']:.0f} s | {res['first_trial_after_s']} s | {analysis} | "
                     f"{res['anytime']['best_found_after_s']} s | {res['by_hand']['seconds']} s, "
                     f"{res['by_hand']['validations']} |")
    lines += ["", "Anytime: the best feasible speedup over ORT's defaults the study had found (its own paired ratios), "
              "against the runtimes' defaults and the expert's engine (alone):", "",
              "| model | " + " | ".join(f"{m} min" for m in MARKS_MIN) + " | OV defaults | NNCF by hand |",
              "|---|" + "---|" * (len(MARKS_MIN) + 2)]
    for model, res in results.items():
        marks = res["anytime"]["marks"]
        cells = [f"{marks[m]:.2f}x" if marks.get(m) else "-" for m in MARKS_MIN]
        ov = next((r for k, r in res["rows"].items() if k.startswith("OV defaults")), {})
        hand = next((r for k, r in res["rows"].items() if k.startswith("NNCF accuracy control")), {})
        speed = [f"{r['alone_speedup']:.2f}x" if r.get("alone_speedup") else "-" for r in (ov, hand)]
        lines.append(f"| {model} | " + " | ".join(cells) + f" | {speed[0]} | {speed[1]} |")
    table = "\n".join(lines)
    with open(os.path.join(out, "expert.md"), "w") as f:
        f.write(table + "\n")
    return table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["minilm-sdpa"], choices=["demo", "minilm", "minilm-sdpa", "ocr-rec"])
    ap.add_argument("--alone", type=int, default=5, help="fresh processes per engine in the alone column (default 5)")
    ap.add_argument("--trials", type=int, default=60, help="trials of the default study (default 60)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=20, help="rounds of the side-by-side timing (default 20)")
    ap.add_argument("--out", default=os.path.join(HERE, "results"), help="output folder (default bench/results)")
    ap.add_argument("--work", help="folder of the studies (default: a new temporary one)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    results = {name: bench_model(name, args) for name in args.models}
    print(write_table(results, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
