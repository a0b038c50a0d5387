"""Per-node run time of a model from ONNX Runtime's own profiler (for the sensitivity ranking)."""
from __future__ import annotations

import json
import os

import onnxruntime as ort

from .session import run_float32


def node_time_shares(model_path: str, batches: list, workdir: str, runs: int = 3) -> dict[str, float]:
    """Share of each node in the fp32 engine's kernel time. Basic optimizations only: they keep the
    node names, which the per-layer parameters are made of."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(workdir, "profile")
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    for _ in range(runs):
        run_float32(sess, batches[0])
    with open(sess.end_profiling()) as f:
        events = json.load(f)
    totals: dict[str, float] = {}
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            name = e["name"][: -len("_kernel_time")]
            totals[name] = totals.get(name, 0.0) + float(e.get("dur", 0))
    whole = sum(totals.values()) or 1.0
    return {k: v / whole for k, v in totals.items()}
