"""`tuner profile`, the child's half: where a built engine spends its time, node by node, from its backend's
own profiler (ONNX Runtime's JSON profile, OpenVINO's PERF_COUNT counters), for any config, not only fp32.
engine_node_times runs in the isolated child that built the engine (tuner.execute.jobs.profile_job); the
parent's half, the table of the winner against the baseline, is tuner.report.profile_table."""
from __future__ import annotations

import os

from ..errors import UserError

PROFILED_BACKENDS = ("onnxruntime", "openvino")
RUNS, MAX_SECONDS = 20, 5.0


def check_profiled(backend: str) -> None:
    if backend not in PROFILED_BACKENDS:
        raise UserError(f"backend {backend}: no per-node profile here (tuner profile reads the profilers of "
                        f"{' and '.join(PROFILED_BACKENDS)})")


def engine_node_times(backend: str, engine, batch: dict, workdir: str, runs: int = RUNS,
                      max_seconds: float = MAX_SECONDS) -> list[dict]:
    """Each runtime node of a built engine: {"name", "op" (as it ran), "ms" (median run), "originals" (the
    model nodes the runtime says it holds, where it says)}, from its backend's profiler (Engine.node_times)."""
    check_profiled(backend)
    node_times = getattr(engine, "node_times", None)
    if node_times is None:
        raise UserError(f"backend {backend}: its engines have no profiler (Engine.node_times)")
    os.makedirs(workdir, exist_ok=True)
    return node_times(batch, workdir, runs, max_seconds)
