"""ONNX Runtime session options from a config, sessions, and running them with float32 outputs."""
from __future__ import annotations

import glob
import json
import os
from typing import Any

import numpy as np
import onnxruntime as ort

from .optimizers import disabled_names

LEVELS = {
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
SESSION_KEYS = ("graph_optimization_level", "execution_mode", "intra_op_num_threads", "inter_op_num_threads", "intra_op_spinning")
PROVIDER = "CPUExecutionProvider"  # the one execution provider of this backend's sessions
DISABLE_PREFIX = "disable_"  # disable_GeluFusion: true turns that graph optimizer off (optimizers.py)
SETTINGS_FILE = "session_options.json"


def session_settings(config: dict[str, Any]) -> dict[str, Any]:
    s = {k: config[k] for k in SESSION_KEYS if k in config}
    s["disabled_optimizers"] = sorted(n for k, v in config.items() if k.startswith(DISABLE_PREFIX) and v
                                      for n in disabled_names(k[len(DISABLE_PREFIX):]))
    return s


def make_session(model_path: str, settings: dict[str, Any], side_by_side: bool = False,
                 optimized_path: str | None = None, profile_prefix: str | None = None) -> ort.InferenceSession:
    """side_by_side: the session is timed round-robin with others in one process. Its spinning
    threads then stop when a run ends; left spinning, every idle session's threads steal the cores
    from the one being timed (8 MobileNetV3 sessions on 2 cores: 3.5 ms alone, 10-14 ms each).
    optimized_path: ONNX Runtime writes the graph it will run there (weights in a file beside it).
    profile_prefix: its profiler writes each node's kernel times to a file of that prefix (end_profiling)."""
    so = ort.SessionOptions()
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    if optimized_path:
        so.optimized_model_filepath = optimized_path
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                    os.path.basename(optimized_path) + ".data")
    so.log_severity_level = 3
    so.graph_optimization_level = LEVELS[settings.get("graph_optimization_level", "all")]
    parallel = settings.get("execution_mode") == "parallel"
    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL if parallel else ort.ExecutionMode.ORT_SEQUENTIAL
    if "intra_op_num_threads" in settings:
        so.intra_op_num_threads = int(settings["intra_op_num_threads"])
    if parallel and "inter_op_num_threads" in settings:
        so.inter_op_num_threads = int(settings["inter_op_num_threads"])
    spinning = settings.get("intra_op_spinning", True)
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    if spinning and side_by_side:
        so.add_session_config_entry("session.force_spinning_stop", "1")
    return ort.InferenceSession(model_path, so, providers=[PROVIDER],
                                disabled_optimizers=settings.get("disabled_optimizers") or None)


_ORT_DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64}


def adapt_feed(session: ort.InferenceSession, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Cast float inputs to the engine's input types (an fp16 engine without fp32 I/O takes float16)."""
    want = {i.name: _ORT_DTYPES.get(i.type) for i in session.get_inputs()}
    return {k: v.astype(want[k]) if want.get(k) is not None and v.dtype != want[k] and v.dtype.kind == "f" else v
            for k, v in batch.items()}


def run_float32(session: ort.InferenceSession, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One run; float16 outputs come back as float32, so every engine compares against the same reference."""
    names = [o.name for o in session.get_outputs()]
    values = session.run(None, adapt_feed(session, batch))
    return {n: v.astype(np.float32) if v.dtype == np.float16 else v for n, v in zip(names, values)}


def write_settings(out_dir: str, settings: dict[str, Any]) -> str:
    path = os.path.join(out_dir, SETTINGS_FILE)
    with open(path, "w") as f:
        json.dump(settings, f, indent=2, sort_keys=True)
    return path


def read_engine_dir(engine_dir: str, backend: str) -> tuple[str, dict[str, Any]]:
    """(model path, settings) of an engine folder that write_settings and OrtEngine.save wrote."""
    models = sorted(glob.glob(os.path.join(engine_dir, "*.onnx")))
    if len(models) != 1 or not os.path.isfile(os.path.join(engine_dir, SETTINGS_FILE)):
        raise ValueError(f"{engine_dir}: not an {backend} engine (one .onnx file and {SETTINGS_FILE} expected)")
    with open(os.path.join(engine_dir, SETTINGS_FILE)) as f:
        return models[0], json.load(f)


def session_activations(model_path: str, settings: dict[str, Any], tensors: list[str],
                        batches: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """`tensors` of the model file, made graph outputs (a graph output is kept through every fusion), as a
    session with `settings` computes them on each batch (float32). Names the graph lacks are left out."""
    import onnx

    model = onnx.load(model_path)
    have = {o for n in model.graph.node for o in n.output} | {i.name for i in model.graph.input}
    wanted = [t for t in dict.fromkeys(tensors) if t in have and t not in {o.name for o in model.graph.output}]
    model.graph.output.extend(onnx.ValueInfoProto(name=t) for t in wanted)
    path = model_path + ".activations.onnx"
    onnx.save(model, path, save_as_external_data=model.ByteSize() > 1_800_000_000)
    try:
        session = make_session(path, settings)
        names, keep = [o.name for o in session.get_outputs()], set(tensors)
        out = []
        for batch in batches:
            values = session.run(None, adapt_feed(session, batch))
            out.append({n: np.asarray(v, dtype=np.float32) for n, v in zip(names, values) if n in keep})
        return out
    finally:
        os.remove(path)
