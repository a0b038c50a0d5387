"""Per-node run time of a model from the OpenVINO CPU plugin's profiler (for the sensitivity ranking)."""
from __future__ import annotations

import statistics

import openvino as ov

from ...inputs.model import HEAVY_OPS, ModelFile, consumers_of, owning_consumer
from ..base import Batch, repeat_runs
from .properties import DEVICE, FLOAT32, compile_properties
from .quantize import read_model


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
    consumers = consumers_of(model.proto)
    for name in op_type:  # vanished heavy nodes: follow the consumers to a node with an owner
        if name in owner or op_type[name] not in HEAVY_OPS:
            continue
        c = owning_consumer(name, consumers, owner)
        if c is not None:
            groups[owner[c]].append(name)
            owner[name] = owner[c]
    shares: dict[str, float] = {}
    for rt_name, t in times.items():
        names = groups.get(rt_name) or []
        heavy = [n for n in names if op_type[n] in HEAVY_OPS] or names
        for n in heavy:
            shares[n] = shares.get(n, 0.0) + t / len(heavy)
    whole = sum(shares.values()) or 1.0
    return {k: v / whole for k, v in shares.items()}


def engine_node_times(engine, batch: dict, runs: int, max_seconds: float) -> list[dict]:
    """OpenVINO: the engine's compiled blob imported again with its properties and PERF_COUNT on."""
    blob = engine.compiled.export_model()
    compiled = ov.Core().import_model(blob.getvalue() if hasattr(blob, "getvalue") else blob, "CPU",
                                      dict(engine.properties) | {"PERF_COUNT": "YES"})
    request = compiled.create_infer_request()
    feed = engine._feed(batch)  # by input index: the blob imported again has the engine's ports, in its order
    times: dict[str, list[float]] = {}
    ops: dict[str, str] = {}

    def run():
        request.infer(feed)
        for p in request.get_profiling_info():  # the last inference's counters
            if p.status == p.Status.EXECUTED:
                times.setdefault(p.node_name, []).append(p.real_time.total_seconds() * 1000.0)
                ops[p.node_name] = p.node_type

    repeat_runs(run, runs, max_seconds)
    originals = {}
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        if "originalLayersNames" in info:
            originals[op.get_friendly_name()] = [n for n in str(info["originalLayersNames"].astype(str)).split(",") if n]
    return [{"name": n, "op": ops[n], "ms": statistics.median(v), "originals": originals.get(n, [])}
            for n, v in times.items()]
