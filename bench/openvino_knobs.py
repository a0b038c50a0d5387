"""What OpenVINO's device-gated knobs do on this CPU: error and side-by-side latency of each (issue 18).

  python bench/openvino_knobs.py                 # demo model 8x64x256, about 2 minutes on 2 cores

Prints the CPU's relevant flags, the plugin's capabilities and own defaults, what the spaces drop here
(the notes), then per engine: the error against the fp32 reference, the median latency timed side by
side with ONNX Runtime's defaults in one process, the build time and the properties the compiled model
reports (a hint the CPU cannot run is dropped silently: it reports f32). Engines: OpenVINO's defaults,
fp32 with the f32 and the bf16 hint, int8 with each hint, int8 with the planted float set, int8
TRANSFORMER, int8-weight with dynamic quantization off (0) and on (32), int4-weight. Run it on a CPU
with BF16 and VNNI to see bf16 and DYNAMIC_QUANTIZATION_GROUP_SIZE work (here they change nothing).
Asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

from tuner.backends.openvino import device
from tuner.cli.demo import write_demo_model
from tuner.execute.evaluate import build, check_accuracy
from tuner.inputs.space import SPACES_DIR
from tuner.measure.latency import LatencyProtocol
from tuner.measure.machine import cpu_flags
from tuner.measure.paired import time_blocks
from tuner.problem.spec import load_problem

PLANTED = [f"block{b}/attn/{t}_proj" for b in (1, 3) for t in "qkv"]  # tuner.cli.demo's outlier inputs
OV = {"backend": "openvino", "static_shapes": True}
ENGINES = {
    "ORT defaults": {"backend": "onnxruntime", "precision": "fp32"},
    "OV defaults (ONNX file, no properties)": {"backend": "openvino", "precision": "fp32"},
    "OV fp32, f32 hint": OV | {"precision": "fp32", "inference_precision": "f32"},
    "OV fp32, bf16 hint": OV | {"precision": "fp32", "inference_precision": "bf16"},
    "OV int8, f32 hint": OV | {"precision": "int8", "inference_precision": "f32"},
    "OV int8, bf16 hint": OV | {"precision": "int8", "inference_precision": "bf16"},
    "OV int8, planted 6 in float, bf16 hint": OV | {"precision": "int8", "inference_precision": "bf16",
                                                    "keep_float": PLANTED},
    "OV int8 TRANSFORMER, bf16 hint": OV | {"precision": "int8", "inference_precision": "bf16",
                                            "int8_model_type": "transformer"},
    "OV int8-weight, DQ 0": OV | {"precision": "int8-weight", "inference_precision": "f32",
                                  "dynamic_quantization_group_size": 0},
    "OV int8-weight, DQ 32": OV | {"precision": "int8-weight", "inference_precision": "f32",
                                   "dynamic_quantization_group_size": 32},
    "OV int4-weight, DQ 32": OV | {"precision": "int4-weight", "inference_precision": "f32",
                                   "dynamic_quantization_group_size": 32},
}
REPORTED = ("INFERENCE_PRECISION_HINT", "INFERENCE_NUM_THREADS", "DYNAMIC_QUANTIZATION_GROUP_SIZE")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="x=8x64x256", help="demo model input shape (default x=8x64x256)")
    ap.add_argument("--rounds", type=int, default=15, help="rounds of the side-by-side timing (default 15)")
    args = ap.parse_args(argv)
    flags = cpu_flags() or frozenset()
    print("CPU flags:", " ".join(sorted(f for f in flags if any(k in f for k in ("avx512", "amx", "vnni"))) or "none"))
    info = device.plugin_info()
    print(f"plugin: {info['name']}, capabilities {info['capabilities']}, own defaults: precision "
          f"{info['inference_precision']}, {info['inference_num_threads']} threads, pinning {info['enable_cpu_pinning']}")
    with tempfile.TemporaryDirectory() as work:
        os.environ.setdefault("TUNER_CACHE", os.path.join(work, "cache"))
        model = write_demo_model(os.path.join(work, "demo.onnx"), outliers=2)
        problem = load_problem(model, os.path.join(SPACES_DIR, "cpu.yaml"), shapes=[args.shape])
        for note in problem.notes:
            print("note:", note)
        engines, rows = [], []
        for i, (label, config) in enumerate(ENGINES.items()):
            engine, _, build_s = build(problem, config, os.path.join(work, str(i)), side_by_side=True)
            cos = check_accuracy(problem, engine)[0]["cos"]
            compiled = getattr(engine, "compiled", None)
            reported = {k: str(compiled.get_property(k)) for k in REPORTED} if compiled is not None else {}
            engines.append(engine)
            rows.append((label, cos, build_s, reported))
            print(f"built {label}: cos {cos:.3g}, {build_s:.1f} s", file=sys.stderr, flush=True)
        samples, _, _ = time_blocks([e.timed_call(problem.batches[0]) for e in engines], LatencyProtocol(max_seconds=60.0),
                                 baseline=0, max_rounds=args.rounds)
        samples = [[ms for block in s for ms in block] for s in samples]
        for e in engines:
            e.close()
    base = statistics.median(samples[0])
    print("\n| engine | error (cos) | median ms | time vs ORT defaults | build s | reported |\n|---|---|---|---|---|---|")
    for (label, cos, build_s, reported), s in zip(rows, samples):
        ms = statistics.median(s)
        print(f"| {label} | {cos:.2g} | {ms:.2f} | {ms / base:.2f} | {build_s:.1f} | "
              f"{', '.join(f'{k}={v}' for k, v in reported.items())} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
