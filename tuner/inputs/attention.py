"""Find attention in an ONNX graph: MatMul -> (Div | Mul | Add | Where | Cast)* -> Softmax -> (Where | IsNaN |
Cast | Dropout | Identity)* -> MatMul, the scaled dot product of a transformer however its exporter spelled
the scale, the mask and the guard of fully masked rows (torch.onnx.export, with dynamo or without, writes
Softmax -> IsNaN/Where -> MatMul for transformers' SDPA attention).

Quantizers treat such a model differently (NNCF's model_type TRANSFORMER keeps the Softmax path and
the attention MatMuls' inputs in a form its int8 kernels handle, and adds SmoothQuant). The pattern only
orders the route variants (tuner.analysis.variants): a graph with a Softmax and a MatMul gets the
transformer variants built and measured whether the pattern is found or not, since a pattern is a guess
about exporters it has not seen."""
from __future__ import annotations

import onnx

# What may stand between the scores MatMul and the Softmax: the 1/sqrt(d) scale (Div or Mul), the mask
# (Add, or Where with -inf) and casts, in any order and number.
BETWEEN = ("Div", "Mul", "Add", "Where", "Cast")
# What may stand between the Softmax and the MatMul with V: the guard of fully masked rows (IsNaN, Where),
# casts, and dropout as exported for inference (Dropout, Identity).
AFTER = ("Where", "IsNaN", "Cast", "Dropout", "Identity")


def attention_softmaxes(graph: onnx.GraphProto) -> list[str]:
    """The names of the Softmax nodes that sit in an attention pattern (main graph only)."""
    producer = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def from_matmul(tensor: str, seen: set[str]) -> bool:
        """Whether `tensor` is a MatMul's output, directly or through scale and mask ops."""
        node = producer.get(tensor)
        if node is None or tensor in seen:
            return False
        if node.op_type == "MatMul":
            return True
        if node.op_type not in BETWEEN:
            return False
        seen.add(tensor)  # by tensor, not name: exporters leave many nodes unnamed
        return any(from_matmul(i, seen) for i in node.input if i)

    def to_matmul(tensor: str, seen: set[str]) -> bool:
        """Whether `tensor` reaches a MatMul's input, directly or through the guard, casts and dropout."""
        for c in consumers.get(tensor, []):
            if c.op_type == "MatMul":
                return True
            if c.op_type in AFTER and c.output[0] not in seen:
                seen.add(c.output[0])
                if any(to_matmul(o, seen) for o in c.output):
                    return True
        return False

    found = []
    for node in graph.node:
        if node.op_type != "Softmax" or not node.input:
            continue
        if to_matmul(node.output[0], set()) and from_matmul(node.input[0], set()):
            found.append(node.name or node.output[0])
    return found


def has_attention(model: onnx.ModelProto) -> bool:
    return bool(attention_softmaxes(model.graph))


def may_have_attention(model: onnx.ModelProto) -> bool:
    """A Softmax and a MatMul in the main graph: the transformer variants are worth their builds."""
    ops = {n.op_type for n in model.graph.node}
    return {"Softmax", "MatMul"} <= ops
