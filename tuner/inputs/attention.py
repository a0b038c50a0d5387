"""Find attention in an ONNX graph: MatMul -> (Div | Mul | Add)* -> Softmax -> MatMul, the scaled dot
product of a transformer however its exporter spelled the scale and the mask.

Quantizers treat such a model differently (NNCF's model_type TRANSFORMER keeps the Softmax path and
the attention MatMuls' inputs in a form its int8 kernels handle, and adds SmoothQuant), so the route
variants of a transformer include those options (tuner.analysis.variants)."""
from __future__ import annotations

import onnx

# What may stand between the scores MatMul and the Softmax: the 1/sqrt(d) scale (Div or Mul) and the
# additive mask (Add), in any order and number.
BETWEEN = ("Div", "Mul", "Add")


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
        if node is None or node.name in seen:
            return False
        if node.op_type == "MatMul":
            return True
        if node.op_type not in BETWEEN:
            return False
        seen.add(node.name)
        return any(from_matmul(i, seen) for i in node.input if i)

    found = []
    for node in graph.node:
        if node.op_type != "Softmax" or not node.input:
            continue
        feeds_matmul = any(c.op_type == "MatMul" for c in consumers.get(node.output[0], []))
        if feeds_matmul and from_matmul(node.input[0], set()):
            found.append(node.name or node.output[0])
    return found


def has_attention(model: onnx.ModelProto) -> bool:
    return bool(attention_softmaxes(model.graph))
