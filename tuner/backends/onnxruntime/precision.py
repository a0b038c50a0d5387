"""What an ONNX Runtime engine computes in: its matrix ops (MatMul, Conv, Gemm and their fused and
quantized forms) counted in the graph the session runs, as ONNX Runtime's optimizer left it. The file
alone can mislead: a QDQ model below the `extended` level runs every MatMul in float between its
DequantizeLinear and QuantizeLinear nodes, and an fp16 model on a CPU without fp16 kernels gets Casts
around float32 ops (its initializers folded back to float32)."""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import tempfile
from collections import Counter
from typing import Any

import onnx
import onnxruntime as ort

from ... import __version__
from ...inputs.model import model_hash
from ...measure.machine import cpu_flags, cpu_model
from ...store import cache
from .session import PROVIDER, make_session

# Matrix ops that run an integer kernel (int4: MatMulNBits, with its `bits`).
QUANTIZED_OPS = frozenset({
    "QLinearMatMul", "QLinearConv", "QLinearConvTranspose", "MatMulInteger", "ConvInteger", "MatMulIntegerToFloat",
    "DynamicQuantizeMatMul", "QGemm", "QAttention", "DynamicQuantizeLSTM", "MatMulNBits", "MatMulBnb4",
})
# Matrix ops that run in float (the fused forms ONNX Runtime's optimizer makes included).
FLOAT_OPS = frozenset({
    "MatMul", "Gemm", "Conv", "ConvTranspose", "FusedMatMul", "FusedGemm", "FusedConv", "NhwcFusedConv",
    "Attention", "MultiHeadAttention", "GroupQueryAttention", "GemmFastGelu",
})
_FLOAT_NAMES = {onnx.TensorProto.FLOAT: "f32", onnx.TensorProto.FLOAT16: "f16", onnx.TensorProto.BFLOAT16: "bf16",
                onnx.TensorProto.DOUBLE: "f64"}


def count_matrix_ops(model: onnx.ModelProto) -> dict[str, Any]:
    """{"inference", "quantized_nodes", "float_nodes", "quantized"} of a graph (see Engine in
    tuner/backends/base.py). A float op's type: that of its first typed input (an initializer, a typed
    value, a Cast's target); "inference" is the type most float ops run in (f32 where none says)."""
    graph = model.graph
    types = {v.name: v.type.tensor_type.elem_type for v in [*graph.value_info, *graph.input, *graph.output]}
    types |= {i.name: i.data_type for i in graph.initializer}
    for node in graph.node:  # what a Cast or a DequantizeLinear makes is known without shape inference
        if node.op_type == "Cast":
            to = next((a.i for a in node.attribute if a.name == "to"), 0)
            types.update({o: to for o in node.output if to})
        elif node.op_type == "DequantizeLinear" and len(node.input) > 1 and types.get(node.input[1]):
            types.update({o: types[node.input[1]] for o in node.output})  # the scale's type
    quantized, kinds, runs = 0, set(), Counter()
    for node in graph.node:
        if node.op_type in QUANTIZED_OPS or (node.op_type.startswith("QLinear") and
                                             any(k in node.op_type for k in ("MatMul", "Conv", "Gemm"))):
            quantized += 1
            bits = next((a.i for a in node.attribute if a.name == "bits"), 8 if node.op_type != "MatMulNBits" else 4)
            kinds.add(f"int{bits}")
        elif node.op_type in FLOAT_OPS:
            known = [_FLOAT_NAMES[types[i]] for i in node.input if types.get(i) in _FLOAT_NAMES]
            runs[known[0] if known else None] += 1
    floats = sum(runs.values())
    named = Counter({k: v for k, v in runs.items() if k})
    return {"inference": named.most_common(1)[0][0] if named else "f32", "quantized_nodes": quantized,
            "float_nodes": floats, "quantized": sorted(kinds)}


def session_precision(model_path: str, settings: dict[str, Any]) -> dict[str, Any]:
    """count_matrix_ops of the graph a session with these settings runs, computed once per distinct
    optimized graph (graph_key) and kept in the tuner's cache: building the counting session costs as
    much as the engine's own (about a second on a 6-layer transformer), every trial. The cache is only
    a shortcut: where its key, read or write fails, the graph is counted as if there were none."""
    try:
        name = f"ort-precision-{graph_key(model_path, settings)}.json"
    except Exception:  # noqa: BLE001  an unhashable model or setting: count without the cache
        return optimized_precision(model_path, settings)
    try:
        stored = cache.read_json(name)
    except Exception:  # noqa: BLE001  an unreadable or half-written entry: count again, and rewrite it
        stored = None
    if isinstance(stored, dict) and _RESULT_KEYS <= stored.keys():
        return stored
    counted = optimized_precision(model_path, settings)
    try:
        cache.write_json(name, counted)
    except Exception:  # noqa: BLE001  a read-only or full cache costs the next trial a session, nothing more
        pass
    return counted


def optimized_precision(model_path: str, settings: dict[str, Any]) -> dict[str, Any]:
    """session_precision without the cache: a second session (one thread) writes its optimized graph
    into a temporary folder; its weights are not read back."""
    with tempfile.TemporaryDirectory(prefix="tuner-ort-graph-") as work:
        path = os.path.join(work, "optimized.onnx")
        make_session(model_path, settings | {"intra_op_num_threads": 1}, optimized_path=path)
        counted = count_matrix_ops(onnx.load(path, load_external_data=False))
    level = settings.get("graph_optimization_level", "all")
    return counted | {"source": f"ONNX Runtime's optimized graph, level {level}"}


_RESULT_KEYS = frozenset({"inference", "quantized_nodes", "float_nodes", "quantized", "source"})
# Session settings that decide how the graph runs, not what it becomes (make_session): threads, the
# execution mode and spinning; the optimized graph of `parallel` and `sequential` is the same. Any other
# setting, one added later included, is part of the key.
_RUN_ONLY = frozenset({"execution_mode", "intra_op_num_threads", "inter_op_num_threads", "intra_op_spinning"})


def graph_key(model_path: str, settings: dict[str, Any]) -> str:
    """What the optimized graph and its count depend on: the model's bytes (its external data too,
    tuner.inputs.model.model_hash; each route writes its own model file), the settings that reach ORT's graph
    optimizers (level and disabled optimizers, defaults spelt out), the provider, ONNX Runtime's version,
    the CPU (ORT picks kernels and layouts by instruction set: an fp16 model gets Casts where the CPU has
    no fp16 kernels) and this module's source (how the ops are counted)."""
    graph = {k: v for k, v in settings.items() if k not in _RUN_ONLY}
    graph["graph_optimization_level"] = settings.get("graph_optimization_level", "all")
    graph["disabled_optimizers"] = sorted(settings.get("disabled_optimizers") or [])
    parts = {"model": model_hash(model_path), "settings": graph, "provider": PROVIDER,
             "onnxruntime": ort.__version__, "cpu": _cpu(), "counter": _counter_source()}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


@functools.lru_cache(maxsize=1)
def _cpu() -> str:
    """The CPU's architecture, model and instruction-set flags."""
    return json.dumps({"machine": platform.machine(), "model": cpu_model(), "flags": sorted(cpu_flags() or [])})


@functools.lru_cache(maxsize=1)
def _counter_source() -> str:
    """A hash of this file: a change to how ops are counted leaves the old counts unread."""
    try:
        with open(__file__, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()[:16]
    except OSError:
        return f"tuner {__version__}"


def file_precision(model_path: str) -> dict[str, Any]:
    """count_matrix_ops of the model file itself (an engine whose provider rewrites the graph its own way)."""
    return count_matrix_ops(onnx.load(model_path, load_external_data=False)) | {"source": "the ONNX Runtime model file"}
