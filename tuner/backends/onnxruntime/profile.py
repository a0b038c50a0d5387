"""Per-node run time from ONNX Runtime's own profiler: the fp32 model's shares (the sensitivity ranking)
and a built engine's nodes (`tuner profile`)."""
from __future__ import annotations

import json
import os
import statistics
from typing import Any

import onnxruntime as ort

from ..base import repeat_runs
from .session import make_session, run_float32


def _kernel_times(profile_file: str) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Per node: its kernel time of each run (ms), and its op type as it ran."""
    with open(profile_file) as f:
        events = json.load(f)
    times: dict[str, list[float]] = {}
    ops: dict[str, str] = {}
    for e in events:
        name = e.get("name", "")
        if e.get("cat") == "Node" and name.endswith("_kernel_time"):
            node = name[: -len("_kernel_time")]
            times.setdefault(node, []).append(float(e.get("dur", 0)) / 1000.0)  # microseconds
            ops[node] = (e.get("args") or {}).get("op_name", "?")
    return times, ops


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
    times, _ = _kernel_times(sess.end_profiling())
    totals = {k: sum(v) for k, v in times.items()}
    whole = sum(totals.values()) or 1.0
    return {k: v / whole for k, v in totals.items()}


def engine_node_times(model_path: str, settings: dict[str, Any], batch: dict, workdir: str, runs: int,
                      max_seconds: float) -> list[dict]:
    """A built engine's runtime nodes: a session over its model file with its own session options and the
    profiler on; each node's median run (the first pays for lazy set-up)."""
    session = make_session(model_path, settings, profile_prefix=os.path.join(workdir, "ort-profile"))
    repeat_runs(lambda: run_float32(session, batch), runs, max_seconds)
    times, ops = _kernel_times(session.end_profiling())
    return [{"name": n, "op": ops[n], "ms": statistics.median(v), "originals": []} for n, v in times.items()]
