"""`tuner profile`, the child's half: where a built engine spends its time, node by node, from its backend's
own profiler (ONNX Runtime's JSON profile, OpenVINO's PERF_COUNT counters), for any config, not only fp32.
engine_node_times runs in the isolated child that built the engine (tuner.execute.jobs.profile_job); the
parent's half, the table of the winner against the baseline, is tuner.report.profile_table."""
from __future__ import annotations

import os

from ..backends.base import ProfilesNodes, get_backend, known_backends
from ..errors import UserError

RUNS, MAX_SECONDS = 20, 5.0


def check_profiled(backend: str) -> None:
    """Refused before anything is built: a backend whose engines have no profiler (Backend.profiles_nodes)."""
    if not get_backend(backend).profiles_nodes:
        raise UserError(f"backend {backend}: no per-node profile here (its Backend does not declare profiles_nodes: "
                        f"{', '.join(b for b in known_backends() if _profiles(b))} do)")


def _profiles(name: str) -> bool:
    try:
        return get_backend(name).profiles_nodes
    except UserError:  # not installed here
        return False


def engine_node_times(backend: str, engine, batch: dict, workdir: str, runs: int = RUNS,
                      max_seconds: float = MAX_SECONDS) -> list[dict]:
    """Each runtime node of a built engine: {"name", "op" (as it ran), "ms" (median run), "originals" (the
    model nodes the runtime says it holds, where it says)}, from its backend's profiler (ProfilesNodes)."""
    check_profiled(backend)
    if not isinstance(engine, ProfilesNodes):
        raise UserError(f"backend {backend}: declares profiles_nodes, but its engine has no node_times "
                        "(tuner.backends.base.ProfilesNodes)")
    os.makedirs(workdir, exist_ok=True)
    return engine.node_times(batch, workdir, runs, max_seconds)
