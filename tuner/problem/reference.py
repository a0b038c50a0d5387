"""The fp32 reference outputs every candidate is compared to: ONNX Runtime on the CPU with every graph
optimization off, whatever the backend being tuned. Cached by model hash + data hash. A problem given
--ref-outputs (the training framework's outputs, tuner.inputs.ref_outputs) has its reference loaded with it and never
runs this; its data hash holds the file's hash, so the two never share a cache entry."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort

from ..store import cache


def reference_outputs(model_path: str, model_hash: str, data_hash: str, batches: list) -> list[dict[str, np.ndarray]]:
    name = f"ref-{model_hash}-{data_hash}.pkl"
    refs = cache.read_pickle(name)
    if refs is None:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        refs = [dict(zip(names, session.run(None, b))) for b in batches]
        cache.write_pickle(name, refs)
    return refs
