"""Per-node run time of a model from the OpenVINO CPU plugin's profiler (for the sensitivity ranking)."""
from __future__ import annotations

import openvino as ov

from ...model import ModelFile
from ..base import Batch
from .properties import DEVICE, FLOAT32, compile_properties
from .quantize import read_model

_HEAVY = ("MatMul", "Gemm", "Conv", "ConvTranspose")


def _consumers(model: ModelFile) -> dict[str, list[str]]:
    producers = {o: n.name for n in model.proto.graph.node for o in n.output}
    out: dict[str, list[str]] = {}
    for n in model.proto.graph.node:
        for i in n.input:
            if i in producers:
                out.setdefault(producers[i], []).append(n.name)
    return out


def node_time_shares(core: ov.Core, model: ModelFile, batches: list[Batch], runs: int = 3) -> dict[str, float]:
    """Share of each ONNX node in the fp32 engine's run time (PERF_COUNT + get_profiling_info).

    The plugin fuses nodes and names a fused node after one of them (a MatMul + bias Add becomes a
    FullyConnected named after the Add); the runtime model's `originalLayersNames` lists the ONNX
    nodes each runtime node holds. A MatMul/Conv missing from every list is given to the runtime
    node that took its consumer. A runtime node's time goes to its MatMul/Gemm/Conv nodes if it has
    any, else is split evenly."""
    shapes = {k: tuple(v.shape) for k, v in batches[0].items()}
    # f32 throughout: in bf16 the plugin adds its own conversions, which belong to no ONNX node
    properties = compile_properties(FLOAT32) | {"PERF_COUNT": "YES"}
    compiled = core.compile_model(read_model(core, model.path, shapes), DEVICE, properties)
    request = compiled.create_infer_request()
    for _ in range(runs):
        request.infer(batches[0])  # warm-up
    times: dict[str, float] = {}
    for _ in range(runs):  # get_profiling_info() holds the last inference's counters
        request.infer(batches[0])
        for p in request.get_profiling_info():
            times[p.node_name] = times.get(p.node_name, 0.0) + p.real_time.total_seconds()
    op_type = dict(model.nodes)
    groups: dict[str, list[str]] = {}
    owner: dict[str, str] = {}
    for op in compiled.get_runtime_model().get_ordered_ops():
        names = [n for n in str(op.get_rt_info()["originalLayersNames"].astype(str)).split(",") if n in op_type]
        groups[op.get_friendly_name()] = names
        for n in names:
            owner[n] = op.get_friendly_name()
    consumers = _consumers(model)
    for name in op_type:  # vanished heavy nodes: follow the consumers to a node with an owner
        if name in owner or op_type[name] not in _HEAVY:
            continue
        todo, seen = list(consumers.get(name, [])), set()
        while todo:
            c = todo.pop(0)
            if c in seen:
                continue
            seen.add(c)
            if c in owner:
                groups[owner[c]].append(name)
                owner[name] = owner[c]
                break
            todo.extend(consumers.get(c, []))
    shares: dict[str, float] = {}
    for rt_name, t in times.items():
        names = groups.get(rt_name) or []
        heavy = [n for n in names if op_type[n] in _HEAVY] or names
        for n in heavy:
            shares[n] = shares.get(n, 0.0) + t / len(heavy)
    whole = sum(shares.values()) or 1.0
    return {k: v / whole for k, v in shares.items()}
