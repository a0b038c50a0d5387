"""ONNX Runtime CPU backend: session options from a config, engine = model file + options JSON."""
from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import onnxruntime as ort

LEVELS = {
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
SESSION_KEYS = ("graph_optimization_level", "execution_mode", "intra_op_num_threads", "inter_op_num_threads", "intra_op_spinning")


def session_settings(config: dict[str, Any]) -> dict[str, Any]:
    s = {k: config[k] for k in SESSION_KEYS if k in config}
    s["disabled_optimizers"] = sorted(k[len("disable_"):] for k, v in config.items() if k.startswith("disable_") and v)
    return s


def make_session(model_path: str, settings: dict[str, Any]) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = LEVELS[settings.get("graph_optimization_level", "all")]
    parallel = settings.get("execution_mode") == "parallel"
    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL if parallel else ort.ExecutionMode.ORT_SEQUENTIAL
    if "intra_op_num_threads" in settings:
        so.intra_op_num_threads = int(settings["intra_op_num_threads"])
    if parallel and "inter_op_num_threads" in settings:
        so.inter_op_num_threads = int(settings["inter_op_num_threads"])
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if settings.get("intra_op_spinning", True) else "0")
    return ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"],
                                disabled_optimizers=settings.get("disabled_optimizers") or None)


def reference_session(model_path: str) -> ort.InferenceSession:
    """fp32, every graph optimization off: the reference the candidates are compared to."""
    return make_session(model_path, {"graph_optimization_level": "disabled"})


def run_batches(session: ort.InferenceSession, batches: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    names = [o.name for o in session.get_outputs()]
    return [dict(zip(names, session.run(None, b))) for b in batches]


def write_engine(out_dir: str, model_path: str, settings: dict[str, Any]) -> str:
    with open(os.path.join(out_dir, "session_options.json"), "w") as f:
        json.dump(settings, f, indent=2, sort_keys=True)
    return out_dir


def backend_version() -> str:
    return f"onnxruntime-{ort.__version__}"
