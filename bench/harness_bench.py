"""The timing harness against deployment (issue 39): does a ratio move with where the engines are timed?

  python bench/harness_bench.py                                # the demo model: minutes, no extra needed
  python bench/harness_bench.py --models demo ocr-rec minilm   # small and large real models (bench extra)

Per model, three pairs of engines, each (engine A, engine B) with A the reference of the ratio B / A:
  ORT/ORT   ONNX Runtime's defaults, and ONNX Runtime with one intra-op thread
  ORT/OV    ONNX Runtime's defaults, and OpenVINO's (compile_model with no properties)
  OV/OV     OpenVINO's defaults, and OpenVINO with an f32 hint and one thread
and per pair three ratios:
  one process   both engines loaded in this process, timed in alternating blocks (the harness before
                issue 39: a trial child timed the baseline and the candidate this way)
  children      each engine in a fresh process of its own, the blocks driven from here (the harness now:
                trials, selection, verify)
  alone         each engine alone in --processes fresh processes, one after another (what a deployment sees:
                the median of the processes' medians, tuner.execute.timing.time_alone)
Prints the CPU's flags, the table, and each ratio's distance from the alone one. Writes nothing; asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from backends_bench import model_inputs  # noqa: E402

from tuner.backends.base import get_backend  # noqa: E402
from tuner.execute.evaluate import build_checked  # noqa: E402
from tuner.execute.timing import alone_ratio, time_alone, time_side_by_side  # noqa: E402
from tuner.measure.latency import LatencyProtocol  # noqa: E402
from tuner.measure.machine import cpu_flags, cpu_model  # noqa: E402
from tuner.measure.paired import relative_to, time_blocks  # noqa: E402
from tuner.problem.spec import config_from_sets, load_problem  # noqa: E402

ENGINES = {
    "ORT defaults": ["backend=onnxruntime"],
    "ORT 1 thread": ["backend=onnxruntime", "intra_op_num_threads=1"],
    "OV defaults": ["backend=openvino"],
    "OV f32 1 thread": ["backend=openvino", "inference_precision=f32", "inference_num_threads=1"],
}
PAIRS = {"ORT/ORT": ("ORT defaults", "ORT 1 thread"), "ORT/OV": ("ORT defaults", "OV defaults"),
         "OV/OV": ("OV defaults", "OV f32 1 thread")}
ISA = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "avx512_fp16")


def one_process(saved: list[tuple[str, str]], batch: dict, protocol: LatencyProtocol, rounds: int) -> float:
    """B / A with both engines loaded here, timed in turn in blocks."""
    engines = [get_backend(backend).load(folder) for backend, folder in saved]
    try:
        samples, converged, _ = time_blocks([e.timed_call(batch) for e in engines], protocol, baseline=0,
                                            max_rounds=rounds)
    finally:
        for e in engines:
            e.close()
    return relative_to(samples, 0, converged)[1][1].ratio


def bench_model(name: str, args) -> list[dict]:
    work = tempfile.mkdtemp(prefix=f"harness-{name}-")
    os.environ.setdefault("TUNER_CACHE", os.path.join(work, "cache"))
    model, inputs = model_inputs(name, work)
    problem = load_problem(model, data=inputs.get("data"), shapes=inputs.get("shapes"), require=inputs["require"])
    saved = {}
    for label, sets in ENGINES.items():
        folder = os.path.join(work, label.replace(" ", "-"))
        built = build_checked(problem, config_from_sets(problem, sets), folder, check=False)
        saved[label] = (built.backend, folder)
    batch, protocol = problem.batches[0], LatencyProtocol(max_seconds=args.seconds)
    rows = []
    for pair, (a, b) in PAIRS.items():
        both = [saved[a], saved[b]]
        print(f"{name} {pair}: alone ...", file=sys.stderr, flush=True)
        alone = time_alone(both, batch, "cpu", processes=args.processes, seconds=args.alone_seconds)
        print(f"{name} {pair}: children, one process ...", file=sys.stderr, flush=True)
        timed, _, _ = time_side_by_side(both, batch, 0, "cpu", args.rounds, protocol, what="the harness bench")
        rows.append({"model": name, "pair": pair, "a": a, "b": b, "a_ms": alone[0].median_ms,
                     "b_ms": alone[1].median_ms, "alone": alone_ratio(alone[1], alone[0]),
                     "children": timed[1][1].ratio, "one process": one_process(both, batch, protocol, args.rounds)})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["demo"], help="demo, ocr-rec, minilm (the last two: bench extra)")
    ap.add_argument("--processes", type=int, default=8, help="fresh processes per engine in the alone ratio")
    ap.add_argument("--alone-seconds", type=float, default=2.0, help="timed seconds per fresh process")
    ap.add_argument("--seconds", type=float, default=30.0, help="the time cap of the two paired timings")
    ap.add_argument("--rounds", type=int, default=40, help="the most rounds of the two paired timings")
    args = ap.parse_args(argv)
    rows = [r for name in args.models for r in bench_model(name, args)]
    flags = cpu_flags() or frozenset()
    print(f"\nCPU: {cpu_model()}, {os.cpu_count()} cores; ISA: "
          + (", ".join(f for f in ISA if f in flags) or "unknown"))
    print(f"ratio = B / A; alone: the medians of {args.processes} fresh processes per engine, 95% interval over them\n")
    print("| model | pair | A (alone ms) | B (alone ms) | one process | children | alone [95%] | one process / alone |"
          " children / alone |\n|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio, lo, hi = r["alone"]
        print(f"| {r['model']} | {r['pair']} | {r['a']} ({r['a_ms']:.2f}) | {r['b']} ({r['b_ms']:.2f}) | "
              f"{r['one process']:.3f} | {r['children']:.3f} | {ratio:.3f} [{lo:.3f}-{hi:.3f}] | "
              f"{r['one process'] / ratio:.3f} | {r['children'] / ratio:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
