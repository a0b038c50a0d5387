"""Tuned engine against ORT defaults, random search and a coarse grid, on one machine (issue 6).

  python bench/run.py --models demo resnet18 mobilenetv3 bert --budget 30 --seeds 0 1 2

Per model: (a) the baseline (ORT defaults, trial 0 of every study); (b) the tuner (TPE, default space)
for --budget trials per seed; (c) random search, same space and budget; (d) a coarse grid: every
precision route with its main options, no per-layer settings. Then the best feasible engine of each
run and the baseline are timed interleaved in one process, so their ratios compare.
Writes bench/results/bench.md, bench.json and bench.html (best feasible latency against trials).
Asserts nothing: a benchmark, not a test.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import optuna

from tuner.api import study_problem
from tuner.cli.demo import write_demo_model
from tuner.execute.jobs import Evaluator
from tuner.inputs.space import SPACES_DIR
from tuner.measure.latency import LatencyProtocol
from tuner.run.options import TuneOptions
from tuner.run.tune import tune_study
from tuner.search.trials import baseline_trial, is_feasible, latency_of

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = {  # name -> (shapes, int ranges, requirement)
    "demo": (["x=8x64x256"], None, "cos<=0.005"),
    "resnet18": (["x=1x3x224x224"], None, "cos<=0.01"),
    "mobilenetv3": (["x=1x3x224x224"], None, "cos<=0.01"),
    "bert": (["input_ids=1x128"], ["input_ids=0:30522"], "cos<=0.005"),
}
GRID = ["precision=fp32", "precision=int8-dynamic", "precision=int8-dynamic,dyn_per_channel=true",
        "precision=int8-static", "precision=int8-static,static_per_channel=true",
        "precision=int8-static,calibration_method=Percentile", "precision=int4-weight",
        "precision=int4-weight,int4_block_size=32", "precision=fp16", "precision=fp16,fp16_block_list=norms"]


def model_path(name: str, work: str) -> str:
    if name == "demo":
        return write_demo_model(os.path.join(work, "demo.onnx"), outliers=2)
    from models import BUILDERS

    return BUILDERS[name]()


def run_study(kind: str, seed: int, model: str, work: str, budget: int, timing_s: float) -> tuple[optuna.Study, float]:
    shapes, ranges, require = MODELS[model]
    name = f"{kind}-{seed}"
    opts = TuneOptions.of(study=name, model=model_path(model, work), storage=f"sqlite:///{work}/{name}.db", shapes=shapes,
                       int_ranges=ranges, require=require, seed=seed, quiet=True, progress=False, select=False,
                       protocol=LatencyProtocol(max_seconds=timing_s),
                       space=os.path.join(SPACES_DIR, "onnxruntime-cpu.yaml"))  # ONNX Runtime's tuner (the grid is its routes)
    if kind == "grid":
        opts.sampler, opts.enqueue, opts.n_trials = "random", GRID, len(GRID) + 1  # the queue covers the budget
    else:
        opts.sampler, opts.n_trials = ("tpe" if kind == "tuner" else "random"), budget
    t0 = time.time()
    return tune_study(opts).study, t0


def summarize_run(study: optuna.Study, t0: float) -> dict:
    feas = [t for t in study.trials if is_feasible(t)]
    best = min(feas, key=latency_of) if feas else None
    curve, b = [], float("inf")
    for t in study.trials:
        if is_feasible(t):
            b = min(b, latency_of(t))
        curve.append(b if b < float("inf") else None)
    near = next(t for t in study.trials if is_feasible(t) and latency_of(t) <= latency_of(best) * 1.03) if best else None
    base = baseline_trial(study)
    return {"best_ms": latency_of(best) if best else None, "baseline_ms": latency_of(base) if base else None,
            "best_trial": best.number if best else None, "config": best.user_attrs["config"] if best else None,
            "error": best.user_attrs["metrics"] if best else None,
            "trials_to_3pct": near.number + 1 if near else None,
            "seconds_to_3pct": (near.datetime_complete.timestamp() - t0) if near else None, "curve": curve}


def interleaved(study: optuna.Study, configs: dict[str, dict], work: str) -> dict[str, float]:
    """Median ms of each config, all timed round-robin in this process; runs that found the same
    config share one engine, so equal configs get equal figures."""
    problem = study_problem(study)
    distinct: dict[str, int] = {}  # config json -> engine index
    engines, index_of = [], {}
    for label, cfg in configs.items():
        key = json.dumps(cfg, sort_keys=True)
        if key not in distinct:
            distinct[key] = len(engines)
            engines.append(cfg)
        index_of[label] = distinct[key]
    with Evaluator(problem.spec, timeout_s=3600) as evaluator:
        results = evaluator.confirm(engines, baseline=0, rounds=20).finalists
    medians = [r.latency.median_ms if r.built else float("nan") for r in results]
    return {label: medians[i] for label, i in index_of.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["demo"], choices=sorted(MODELS), help="models (default demo)")
    ap.add_argument("--budget", type=int, default=30, help="trials per tuner / random run (default 30)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of the tuner and random runs")
    ap.add_argument("--timing-s", type=float, default=1.0, help="latency cap per trial in seconds (default 1)")
    ap.add_argument("--out", default=os.path.join(HERE, "results"), help="output folder (default bench/results)")
    args = ap.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    os.makedirs(args.out, exist_ok=True)
    results = {}
    for model in args.models:
        work = tempfile.mkdtemp(prefix=f"bench-{model}-")
        os.environ.setdefault("TUNER_CACHE", os.path.join(work, "cache"))
        runs = {}
        for kind, seeds in (("tuner", args.seeds), ("random", args.seeds), ("grid", [0])):
            for seed in seeds:
                study, t0 = run_study(kind, seed, model, work, args.budget, args.timing_s)
                runs[f"{kind}-{seed}"] = summarize_run(study, t0)
                print(f"{model} {kind} seed {seed}: best {runs[f'{kind}-{seed}']['best_ms']} ms, "
                      f"{time.time() - t0:.0f} s", file=sys.stderr, flush=True)
        finalists = ({"baseline": baseline_trial(study).user_attrs["config"]}
                     | {k: r["config"] for k, r in runs.items() if r["config"] is not None})
        final = interleaved(study, finalists, work)
        for k, r in runs.items():
            r["final_ms"] = final.get(k)
            r["final_speedup"] = final["baseline"] / final[k] if k in final else None
        results[model] = {"baseline_final_ms": final["baseline"], "requirement": MODELS[model][2], "runs": runs}
        write_outputs(results, args.out)  # after every model: a crash later keeps what is done
    return 0


def _med_range(values, fmt: str = ".2f") -> str:
    """Median (min–max) of the runs that have a value; '-' when none has."""
    v = [x for x in values if x is not None]
    if not v:
        return "-"
    one = f"{{:{fmt}}}".format
    return f"{one(statistics.median(v))} ({one(min(v))}–{one(max(v))})" if len(v) > 1 else one(v[0])


def write_outputs(results: dict, out: str) -> None:
    lines = ["| model | requirement | strategy | speedup, interleaved (median, range) | best ms in search | "
             "trials to within 3% | seconds to within 3% | winner error (primary) |", "|---|---|---|---|---|---|---|---|"]
    for model, res in results.items():
        primary = res["requirement"].split("<")[0]
        lines.append(f"| {model} | {res['requirement']} | baseline (ORT defaults) | 1.00 | {res['baseline_final_ms']:.2f} "
                     "(interleaved) | - | - | 0 |")
        for kind in ("tuner", "random", "grid"):
            rs = [r for k, r in res["runs"].items() if k.startswith(kind + "-")]
            lines.append(f"| {model} | {res['requirement']} | {kind} ({len(rs)} run{'s' if len(rs) > 1 else ''}) | "
                         f"{_med_range(r['final_speedup'] for r in rs)} | {_med_range(r['best_ms'] for r in rs)} | "
                         f"{_med_range((r['trials_to_3pct'] for r in rs), '.0f')} | "
                         f"{_med_range((r['seconds_to_3pct'] for r in rs), '.0f')} | "
                         f"{_med_range(((r['error'] or {}).get(primary) for r in rs), '.2g')} |")
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(out, "bench.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(out, "bench.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
    write_figure(results, os.path.join(out, "bench.html"))


def write_figure(results: dict, path: str) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=len(results), cols=1, subplot_titles=list(results))
    colors = {"tuner": "#1f77b4", "random": "#ff7f0e"}
    for row, (model, res) in enumerate(results.items(), start=1):
        for k, r in res["runs"].items():
            kind = k.split("-")[0]
            if kind in colors:
                fig.add_trace(go.Scatter(y=r["curve"], x=list(range(1, len(r["curve"]) + 1)), mode="lines",
                                         name=f"{model} {k}", line={"color": colors[kind]}), row=row, col=1)
        fig.update_yaxes(title_text="best feasible ms (search timing)", row=row, col=1)
    fig.update_xaxes(title_text="trials")
    fig.write_html(path, include_plotlyjs=True)


if __name__ == "__main__":
    sys.exit(main())
