"""Does tuning for the mix of shapes a model serves matter on this CPU (issue 42)? One real-weight encoder
(paraphrase-MiniLM-L3, bench/encoder.py), a two-set workload: batch 1 at 16 tokens (most requests) and batch 8 at
128 tokens (bulk), both cut from the same tokenized sentences.

  python bench/workload_bench.py --trials 20           # two studies and the side-by-side timing, about 25 min on 2 cores
  python bench/workload_bench.py --model demo --trials 4 --rounds 5     # a smoke run, minutes

Two studies of the default space (cpu.yaml where OpenVINO is installed), the same budget and seed:
- the single-shape study, at the bulk shape only (what a study did before workloads);
- the workload study, both sets with their weights.
Then four engines rebuilt, checked again at both sets and timed side by side at each set (Evaluator.confirm:
each engine in a process of its own, in paired blocks): ONNX Runtime's defaults (the baseline), OpenVINO's
defaults, the single-shape winner and the workload winner. Printed: each one's speedup over ONNX Runtime's
defaults at each set and weighted, and whether it meets the requirement at both. The figures say whether the
mix matters here; they are reported whichever way they fall. Prints the CPU's flags. Writes
bench/results/workload.json and workload.md. Asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from tuner.cli.demo import write_demo_model  # noqa: E402
from tuner.execute.jobs import Evaluator  # noqa: E402
from tuner.inputs.configs import defaults_chooser, normalize  # noqa: E402
from tuner.inputs.space import SPACES_DIR  # noqa: E402
from tuner.measure.latency import LatencyProtocol  # noqa: E402
from tuner.measure.machine import cpu_flags  # noqa: E402
from tuner.problem.spec import load_problem  # noqa: E402
from tuner.run.options import TuneOptions  # noqa: E402
from tuner.run.tune import tune_study  # noqa: E402

FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "avx512_fp16")


def model_setup(name: str, work: str) -> tuple[str, str | None, list[str], list[str], str]:
    """(model, data, the single-shape study's --shape, the workload's --shape sets, requirement)."""
    if name == "demo":
        path = write_demo_model(os.path.join(work, "demo.onnx"), outliers=2)
        return path, None, ["x=8x64x256"], ["x=1x64x256@0.7", "x=8x64x256@0.3"], "cos<=0.005"
    import encoder

    path, data = encoder.minilm_model("eager")
    big = f"{encoder.BATCH}x{encoder.SEQ}"
    names = [n for n in np.load(data).files]
    small_set = ",".join(f"{n}=1x16" for n in names)
    big_set = ",".join(f"{n}={big}" for n in names)
    return path, data, [], [f"{small_set}@0.7", f"{big_set}@0.3"], "cos<=0.01"


def run_study(name: str, model: str, data: str | None, shapes: list[str], require: str, work: str,
              args) -> dict | None:
    opts = TuneOptions.of(study=name, model=model, storage=f"sqlite:///{work}/{name}.db", data=data,
                       shapes=shapes or None, require=require, seed=args.seed, n_trials=args.trials,
                       protocol=LatencyProtocol(max_seconds=args.timing_s), quiet=True, progress=False, top_k=3)
    result = tune_study(opts)
    print(f"  {name}: {len(result.study.trials)} trials, winner trial "
          f"{result.winner['trial'] if result.winner else None}", flush=True)
    return result.winner


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="minilm", choices=["minilm", "demo"])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timing-s", type=float, default=2.0, help="each trial's timing cap per set, seconds")
    ap.add_argument("--rounds", type=int, default=30, help="side-by-side rounds at each set")
    args = ap.parse_args()
    flags = cpu_flags() or frozenset()
    print("CPU flags:", " ".join(f for f in FLAGS if f in flags) or "none of " + ", ".join(FLAGS), flush=True)
    out_dir = os.path.join(HERE, "results")
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="workload-bench-") as work:
        model, data, single, workload, require = model_setup(args.model, work)
        print("single-shape study ...", flush=True)
        one = run_study("single", model, data, single, require, work, args)
        print("workload study ...", flush=True)
        mixed = run_study("workload", model, data, workload, require, work, args)
        problem = load_problem(model, os.path.join(SPACES_DIR, "cpu.yaml"), data=data, shapes=workload,
                               require=require)
        rows = {"ONNX Runtime defaults": _defaults(problem, "onnxruntime")}
        if "openvino" in problem.space.backends:
            rows["OpenVINO defaults"] = _defaults(problem, "openvino")
        if one and one["config"].get("static_shapes"):
            # built for its one shape, it serves no other: timed here as the nearest engine that serves both
            rows["single-shape winner, static_shapes off (as won it served only its shape)"] = (
                one["config"] | {"static_shapes": False})
        elif one:
            rows["single-shape winner"] = one["config"]
        if mixed:
            rows["workload winner"] = mixed["config"]
        distinct = []
        for config in rows.values():
            if config not in distinct:
                distinct.append(config)
        print(f"timing {len(distinct)} engines side by side at each set ...", flush=True)
        with tempfile.TemporaryDirectory() as saved, Evaluator(problem.spec, timeout_s=7200) as evaluator:
            results = evaluator.confirm(distinct, baseline=0, rounds=args.rounds, save_dir=saved).finalists
    table = {}
    for label, config in rows.items():
        r = results[distinct.index(config)]
        table[label] = {"config": config, "feasible": r.feasible, "failed": r.error,
                        "speedup": 1.0 / r.relative.ratio if r.built else None,
                        "per_set": {f["shapes"]: 1.0 / f["ratio"] for f in r.workload or []}}
    sets = [s.rpartition("@")[0] for s in workload]
    lines = [f"workload bench, {args.model}, {args.trials} trials per study, CPU flags: "
             + (" ".join(f for f in FLAGS if f in flags) or "none"), "",
             "| engine | " + " | ".join(f"speedup at {s} ({w})" for s, w in zip(sets, ("0.7", "0.3")))
             + " | weighted | meets the requirement at both |", "|---" * (len(sets) + 3) + "|"]
    for label, row in table.items():
        if row["failed"]:
            lines.append(f"| {label} | failed: {row['failed']} |")
            continue
        per = list(row["per_set"].values())
        lines.append(f"| {label} | " + " | ".join(f"{v:.2f}x" for v in per) + f" | {row['speedup']:.2f}x | "
                     f"{'yes' if row['feasible'] else 'no'} |")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(out_dir, "workload.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(out_dir, "workload.json"), "w") as f:
        json.dump(table, f, indent=1, default=str)


def _defaults(problem, backend: str) -> dict:
    """The backend's defaults: every parameter at its default under that backend."""
    values = {"backend": backend} if problem.space.param("backend") is not None else {}
    return normalize(problem.space, defaults_chooser(values), problem.graph_nodes)


if __name__ == "__main__":
    main()
