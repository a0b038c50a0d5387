"""What a trial pays before its build: a child process that loads the problem (model, data, space,
backends, reference) once per trial and validates it again (ONNX checker, model hash), against the trial
workers that trust their parent (one persistent child per worker, given the parent's checked spec).

  python bench/trial_overhead_bench.py --model minilm          # the real-weight encoder (a minute or two)
  python bench/trial_overhead_bench.py --model demo

Per mode: the wall time of LOADS problem loads (each a job, as a trial's start), and of TRIALS trials of the
space's default config timed paired against the baseline, as the study's trials are. Prints the overhead
per trial in seconds and as a share of a trial's wall time. Asserts nothing.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from backends_bench import model_inputs  # noqa: E402

from tuner.execute.evaluate import ensure_reference  # noqa: E402
from tuner.execute.jobs import Evaluator, loaded_problem  # noqa: E402
from tuner.inputs.configs import defaults_chooser, normalize  # noqa: E402
from tuner.measure.machine import cpu_flags  # noqa: E402
from tuner.problem.spec import load_problem  # noqa: E402


def load_job(spec: dict, cache_dir: str, study: str = "", on_phase=None) -> float:
    """What a trial's child does before its build; returns the seconds it took in the child."""
    t0 = time.perf_counter()
    ensure_reference(loaded_problem(spec, cache_dir))
    return time.perf_counter() - t0


def run_mode(problem, trusted: bool, loads: int, trials: int, work: str) -> dict:
    spec = problem.spec if trusted else dataclasses.replace(problem.spec, model_hash=None)
    config = normalize(problem.space, defaults_chooser({}), problem.graph_nodes)
    with Evaluator(spec, persistent=trusted, baseline={"precision": "fp32"} if "backend" not in config else
                   {"backend": config["backend"], "precision": "fp32"}) as ev:
        load_walls = []
        for _ in range(loads):
            t0 = time.perf_counter()
            ev._call(load_job)
            load_walls.append(time.perf_counter() - t0)
        trial_walls = []
        for i in range(trials):
            t0 = time.perf_counter()
            ev.measure(config, os.path.join(work, f"{trusted}-{i}"))
            trial_walls.append(time.perf_counter() - t0)
    # the first load of a persistent child is its one start-up: spread over the trials it serves
    overhead = statistics.median(load_walls[1:]) + (load_walls[0] / (loads + trials) if trusted else 0.0)
    return {"load_s": load_walls, "trial_s": trial_walls, "overhead_s": overhead,
            "share": overhead / statistics.median(trial_walls)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="minilm", choices=["demo", "minilm", "ocr-rec"])
    ap.add_argument("--loads", type=int, default=5)
    ap.add_argument("--trials", type=int, default=4)
    args = ap.parse_args(argv)
    print("CPU flags:", " ".join(sorted(cpu_flags() & {"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16"})))
    with tempfile.TemporaryDirectory(prefix="overhead-") as work:
        os.environ.setdefault("TUNER_CACHE", os.path.join(work, "cache"))
        path, inputs = model_inputs(args.model, work)
        problem = load_problem(path, data=inputs.get("data"), shapes=inputs.get("shapes"), require=inputs["require"])
        print(f"model {args.model}: {os.path.getsize(path) / 1e6:.1f} MB, space {os.path.basename(problem.space.path)}")
        rows = {}
        for trusted in (False, True):
            rows[trusted] = run_mode(problem, trusted, args.loads, args.trials, work)
        print("\n| trial workers | problem load per trial (s) | trial wall, median (s) | overhead per trial |")
        print("|---|---|---|---|")
        for trusted, label in ((False, "a fresh child per trial, validating again (before)"),
                               (True, "one persistent child per worker, trusting its parent (after)")):
            r = rows[trusted]
            print(f"| {label} | {r['overhead_s']:.3f} | {statistics.median(r['trial_s']):.2f} | {100 * r['share']:.1f}% |")
        print(f"\nloads (s): before {[round(x, 3) for x in rows[False]['load_s']]}, "
              f"after {[round(x, 3) for x in rows[True]['load_s']]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
