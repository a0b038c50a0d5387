"""Precision through the graph: ONNX -> ONNX rewrites that a strongly typed TensorRT network obeys.

TensorRT 11 has no FP16/INT8 builder flags and no per-layer precision: a network's types come from the
graph. So fp16/bf16 are cast passes and int8 is explicit Q/DQ. Every function takes a ModelProto and
returns a new one (the input is never modified), so each is checked on ONNX Runtime's CPU.

- fp16: ONNX Runtime's converter (onnxruntime.transformers.float16.convert_float_to_float16).
- bf16: ONNX Runtime has no bf16 converter, so `to_bf16` is a small cast pass written here.
  ONNX Runtime's CPU provider has no bf16 kernels for MatMul/Add/Mul/Div/Erf/Softmax (checked with
  1.32), so a bf16 graph cannot run there; `emulate_bf16` turns it into an fp32 graph that rounds every
  bf16 tensor through bf16 (Cast pairs), which ONNX Runtime's CPU runs.
- int8: signed symmetric Q/DQ from onnxruntime.quantization.quantize_static (QDQ format, QInt8
  activations and weights, ActivationSymmetric/WeightSymmetric), the form TensorRT consumes.

The ONNX Runtime GPU backend uses the same rewrites (its TensorRT execution provider is TensorRT).
"""
from __future__ import annotations

import copy
import os
import tempfile
from collections.abc import Iterable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ...inputs.data import Batch
from ...inputs.model import constants_to_initializers, ensure_opset
from .bf16 import bf16_bits_to_float32, float32_to_bf16_bits
from .calibration import FP16_BLOCK_LISTS, BatchReader, quiet_tools

ROUTES = ("fp32", "fp16", "bf16", "int8")
# The precision-route parameters these rewrites read: ONNX rewrites before parsing, so every supported
# TensorRT (and ONNX Runtime's TensorRT/CUDA providers) has them.
ROUTE_OPTIONS = ("precision", "lowp_block_list", "int8_per_channel", "int8_calibration", "int8_op_types")
LOWP_ROUTES = ("fp16", "bf16")
# Op types kept in float for fp16/bf16 by a space's `lowp_block_list` choice (the ORT backend's lists).
BLOCK_LISTS = FP16_BLOCK_LISTS
INT8_OP_TYPES: dict[str, tuple[str, ...] | None] = {
    "weighted": ("MatMul", "Gemm", "Conv", "ConvTranspose"),  # Q/DQ at the inputs of GEMM-like ops
    "all": None,  # ONNX Runtime's default list of quantizable ops
}
# Ops whose output type is set by an attribute or fixed (not by their float inputs): never recast.
_TYPE_FIXED_OPS = {
    "Cast", "CastLike", "Constant", "ConstantOfShape", "QuantizeLinear", "DequantizeLinear", "Shape", "Size",
    "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "EyeLike", "Multinomial",
}
# Float inputs that must stay float32 whatever the node computes in (scales, regions of interest).
_FLOAT_ONLY_INPUTS = {"Resize": {1, 2}, "Upsample": {1}}


def _ort_default_block_list() -> list[str]:
    """ONNX Runtime's own list of ops its fp16 converter leaves in float (ML ops, TopK, Range, ...)."""
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST

    return list(DEFAULT_OP_BLOCK_LIST)


# ---------------------------------------------------------------------------------------------- fp16


def to_fp16(model: onnx.ModelProto, keep_nodes: Iterable[str] = (), keep_ops: Iterable[str] = ()) -> onnx.ModelProto:
    """Every float tensor in fp16 except the nodes/op types kept in fp32; graph inputs and outputs stay fp32."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    with quiet_tools():
        return convert_float_to_float16(copy.deepcopy(model), keep_io_types=True,
                                        op_block_list=_ort_default_block_list() + list(keep_ops),
                                        node_block_list=list(keep_nodes) or None)


# ---------------------------------------------------------------------------------------------- bf16


def _bf16_initializer(t: TensorProto, name: str) -> TensorProto:
    bits = float32_to_bf16_bits(numpy_helper.to_array(t))
    out = TensorProto(name=name, data_type=TensorProto.BFLOAT16, dims=list(t.dims))
    out.raw_data = bits.tobytes()
    return out


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every tensor name, from shape inference over the main graph."""
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    types = {t.name: t.data_type for t in g.initializer}
    for v in list(g.input) + list(g.value_info) + list(g.output):
        if v.type.HasField("tensor_type"):
            types[v.name] = v.type.tensor_type.elem_type
    return types


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


class _CastPass:
    """Rewrites the main graph in order, inserting one Cast per (tensor, target type) where needed."""

    def __init__(self, model: onnx.ModelProto, low: int, keep_nodes: set[str], keep_ops: set[str]):
        self.model, self.low = model, low
        self.g = model.graph
        self.types = _elem_types(model)
        self.inits = {t.name: t for t in self.g.initializer}
        self.keep_nodes, self.keep_ops = keep_nodes, keep_ops
        self.current: dict[str, int] = {}  # tensor name -> its type after the rewrite, for float tensors
        self.casts: dict[tuple[str, int], str] = {}
        self.new_inits: list[TensorProto] = []

    def computes_low(self, node: onnx.NodeProto) -> bool:
        return (node.name not in self.keep_nodes and node.op_type not in self.keep_ops
                and node.op_type not in _TYPE_FIXED_OPS and not _has_subgraph(node))

    def converted(self, name: str, to: int, before: list[onnx.NodeProto]) -> str:
        """The name of `name` in type `to`: itself, a converted initializer, or a new Cast's output."""
        if self.current.get(name, TensorProto.FLOAT) == to:
            return name
        key = (name, to)
        if key not in self.casts:
            suffix = "bf16" if to == TensorProto.BFLOAT16 else "fp16" if to == TensorProto.FLOAT16 else "fp32"
            out = f"{name}/{suffix}"
            if name in self.inits and to == TensorProto.BFLOAT16:
                self.new_inits.append(_bf16_initializer(self.inits[name], out))
            else:
                before.append(helper.make_node("Cast", [name], [out], to=to, name=f"{name}/cast_{suffix}"))
            self.current[out] = to
            self.casts[key] = out
        return self.casts[key]

    def run(self) -> None:
        outputs = {o.name for o in self.g.output}
        renamed: dict[str, str] = {}  # graph outputs computed in low precision: their low-precision name
        nodes: list[onnx.NodeProto] = []
        tail: list[onnx.NodeProto] = []
        for node in self.g.node:
            low = self.computes_low(node)
            want = self.low if low else TensorProto.FLOAT
            before: list[onnx.NodeProto] = []
            for i, orig in enumerate(node.input):
                if not orig or self.types.get(orig) != TensorProto.FLOAT:
                    continue
                target = TensorProto.FLOAT if i in _FLOAT_ONLY_INPUTS.get(node.op_type, ()) else want
                node.input[i] = self.converted(renamed.get(orig, orig), target, before)
            for i, name in enumerate(node.output):
                if not low or self.types.get(name) != TensorProto.FLOAT:
                    continue
                if name in outputs:  # graph outputs stay float32: compute into a renamed tensor, cast at the end
                    renamed[name] = node.output[i] = f"{name}/low"
                    tail.append(helper.make_node("Cast", [renamed[name]], [name], to=TensorProto.FLOAT,
                                                 name=f"{name}/cast_out"))
                self.current[node.output[i]] = self.low
            nodes.extend(before)
            nodes.append(node)
        del self.g.node[:]
        self.g.node.extend(nodes + tail)
        self.g.initializer.extend(self.new_inits)
        del self.g.value_info[:]  # stale types; shape inference recomputes them


def _drop_unused_initializers(model: onnx.ModelProto) -> None:
    used = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
    keep = [t for t in model.graph.initializer if t.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)


def to_bf16(model: onnx.ModelProto, keep_nodes: Iterable[str] = (), keep_ops: Iterable[str] = ()) -> onnx.ModelProto:
    """Every float tensor in bf16 except the nodes/op types kept in fp32 (and ONNX Runtime's default
    block list); graph inputs and outputs stay fp32. Nodes with subgraphs (If, Loop, Scan) stay fp32."""
    out = copy.deepcopy(model)
    _CastPass(out, TensorProto.BFLOAT16, set(keep_nodes), set(keep_ops) | set(_ort_default_block_list())).run()
    _drop_unused_initializers(out)
    return out


def emulate_bf16(model: onnx.ModelProto) -> onnx.ModelProto:
    """An fp32 model that computes like `model` (a bf16 graph) but rounds each bf16 tensor through bf16:
    bf16 initializers become their exact fp32 values, Cast(to=bf16) becomes Cast(bf16)+Cast(fp32), and
    each bf16 node output is rounded the same way. For checking bf16 rewrites on a CPU without bf16
    kernels: it models bf16 storage between ops, not bf16 arithmetic inside an op."""
    types = _elem_types(model)
    out = copy.deepcopy(model)
    g = out.graph
    inits = []
    for t in g.initializer:
        if t.data_type == TensorProto.BFLOAT16:
            bits = np.frombuffer(t.raw_data, dtype=np.uint16).reshape(list(t.dims)) if t.raw_data else \
                np.asarray(t.int32_data, dtype=np.uint16).reshape(list(t.dims))
            inits.append(numpy_helper.from_array(bf16_bits_to_float32(bits), t.name))
        else:
            inits.append(t)
    del g.initializer[:]
    g.initializer.extend(inits)
    nodes: list[onnx.NodeProto] = []
    for node in g.node:
        nodes.append(node)
        for i, name in enumerate(node.output):
            if types.get(name) != TensorProto.BFLOAT16:
                continue
            raw = f"{name}/unrounded"
            node.output[i] = raw
            for a in node.attribute:  # Cast(to=bf16) now yields fp32; the pair below does the rounding
                if node.op_type == "Cast" and a.name == "to":
                    a.i = TensorProto.FLOAT
            nodes.append(helper.make_node("Cast", [raw], [f"{name}/bf16"], to=TensorProto.BFLOAT16))
            nodes.append(helper.make_node("Cast", [f"{name}/bf16"], [name], to=TensorProto.FLOAT))
    del g.node[:]
    g.node.extend(nodes)
    del g.value_info[:]
    return out


# ---------------------------------------------------------------------------------------------- int8


def to_int8_qdq(model: onnx.ModelProto, calib: list[Batch], keep_nodes: Iterable[str] = (),
                per_channel: bool = False, method: str = "MinMax", op_types: str = "weighted",
                cache_path: str | None = None) -> onnx.ModelProto:
    """Signed symmetric int8 Q/DQ (zero points 0, as TensorRT requires) from ONNX Runtime's static
    quantizer; the nodes in `keep_nodes` stay in float."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    src = copy.deepcopy(model)
    constants_to_initializers(src)  # ORT's quantizers read weights from initializers only
    src = ensure_opset(src, 13)
    with tempfile.TemporaryDirectory() as tmp, quiet_tools():
        out_path = os.path.join(tmp, "int8.onnx")
        quantize_static(src, out_path, BatchReader(calib) if not (cache_path and os.path.isfile(cache_path)) else None,
                        quant_format=QuantFormat.QDQ, op_types_to_quantize=INT8_OP_TYPES[op_types],
                        per_channel=per_channel, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        nodes_to_exclude=list(keep_nodes), calibrate_method=getattr(CalibrationMethod, method),
                        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True},
                        calibration_cache_path=cache_path)
        return onnx.load(out_path)


# ---------------------------------------------------------------------------------------------- dispatch


def apply_precision(model: onnx.ModelProto, config: dict[str, Any], calib: list[Batch],
                    cache_path: str | None = None) -> onnx.ModelProto:
    """The graph of a config's precision route (strong typing: the graph carries the precision)."""
    route = config.get("precision", "fp32")
    keep = list(config.get("keep_float", []))
    ops = BLOCK_LISTS[config.get("lowp_block_list", "none")]
    if route == "fp32":
        return model
    if route == "fp16":
        return to_fp16(model, keep, ops)
    if route == "bf16":
        return to_bf16(model, keep, ops)
    if route == "int8":
        return to_int8_qdq(model, calib, keep, bool(config.get("int8_per_channel", False)),
                           config.get("int8_calibration", "MinMax"), config.get("int8_op_types", "weighted"),
                           cache_path)
    raise ValueError(f"unknown precision route {route!r}; tensorrt realises {', '.join(ROUTES)}")


def output_is_float32(model: onnx.ModelProto) -> bool:
    return all(o.type.tensor_type.elem_type == TensorProto.FLOAT for o in model.graph.output)
