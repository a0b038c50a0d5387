"""The built-in demo model: a small transformer encoder built with the onnx helper API (no download).

Seeded weights; optional planted outliers scale the activations of chosen blocks the way real
transformers' outlier features do, so quantizing those blocks breaks accuracy while the rest stays safe.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import UserError

DEMO_SEQ = 64
DEMO_HIDDEN = 256
DEMO_FFN = 1024
DEMO_LAYERS = 4


def build_demo_model(
    layers: int = DEMO_LAYERS,
    hidden: int = DEMO_HIDDEN,
    ffn: int = DEMO_FFN,
    seq: int = DEMO_SEQ,
    outlier_blocks: tuple[int, ...] = (),
    seed: int = 0,
) -> onnx.ModelProto:
    """Return an encoder with input `x` [batch, seq, hidden] and output `y` of the same shape.

    Every block is named `block{i}/...` so per-layer groups can match on `block\\d+`.
    """
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def weight(name: str, shape: tuple[int, ...], scale: float, row_gain: np.ndarray | None = None) -> str:
        w = rng.standard_normal(shape) * scale
        if row_gain is not None:  # rows that meet outlier channels shrink: the fp32 function stays tame
            w = w / row_gain[:, None]
        inits.append(numpy_helper.from_array(w.astype(np.float32), name))
        return name

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    def node(op: str, inputs: list[str], name: str, **attrs) -> str:
        out = f"{name}_out"
        nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    ln_scale = const("ln_scale", np.ones(hidden, np.float32))
    ln_bias = const("ln_bias", np.zeros(hidden, np.float32))
    heads = 4
    head_dim = hidden // heads
    const("qkv_shape", np.array([0, 0, heads, head_dim], np.int64))
    const("merge_shape", np.array([0, 0, hidden], np.int64))
    const("attn_scale", np.array(1.0 / np.sqrt(head_dim), np.float32))
    const("sqrt2", np.array(np.sqrt(2.0), np.float32))
    const("one", np.array(1.0, np.float32))
    const("half", np.array(0.5, np.float32))

    x = "x"
    s = 1.0 / np.sqrt(hidden)
    for i in range(layers):
        p = f"block{i}"
        h = node("LayerNormalization", [x, ln_scale, ln_bias], f"{p}/ln1", axis=-1, epsilon=1e-5)
        # Outlier features as in real transformers: a few channels of the normalized input carry
        # huge magnitudes (large LayerNorm gains) and the weights that read them are small, so the
        # fp32 block computes what a normal one does, but a per-tensor int8 scale of its inputs
        # leaves the ordinary channels, which carry the signal, with almost no resolution.
        gain = None
        if i in outlier_blocks:
            gain = np.ones(hidden, np.float32)
            gain[rng.choice(hidden, 4, replace=False)] = 60.0
            h = node("Mul", [h, const(f"{p}/outlier_gain", gain)], f"{p}/outlier")
        heads_out = {}
        for t in ("q", "k", "v"):
            m = node("MatMul", [h, weight(f"{p}/W{t}", (hidden, hidden), s, gain)], f"{p}/attn/{t}_proj")
            a = node("Add", [m, weight(f"{p}/b{t}", (hidden,), 0.02)], f"{p}/attn/{t}_bias")
            r = node("Reshape", [a, "qkv_shape"], f"{p}/attn/{t}_reshape")
            perm = [0, 2, 3, 1] if t == "k" else [0, 2, 1, 3]
            heads_out[t] = node("Transpose", [r], f"{p}/attn/{t}_transpose", perm=perm)
        scores = node("MatMul", [heads_out["q"], heads_out["k"]], f"{p}/attn/scores")
        scores = node("Mul", [scores, "attn_scale"], f"{p}/attn/scale")
        probs = node("Softmax", [scores], f"{p}/attn/softmax", axis=-1)
        ctx = node("MatMul", [probs, heads_out["v"]], f"{p}/attn/context")
        ctx = node("Transpose", [ctx], f"{p}/attn/ctx_transpose", perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, "merge_shape"], f"{p}/attn/ctx_reshape")
        o = node("MatMul", [ctx, weight(f"{p}/Wo", (hidden, hidden), s)], f"{p}/attn/out_proj")
        o = node("Add", [o, weight(f"{p}/bo", (hidden,), 0.02)], f"{p}/attn/out_bias")
        x = node("Add", [x, o], f"{p}/attn/residual")
        h = node("LayerNormalization", [x, ln_scale, ln_bias], f"{p}/ln2", axis=-1, epsilon=1e-5)
        f1 = node("MatMul", [h, weight(f"{p}/W1", (hidden, ffn), s)], f"{p}/ffn/fc1")
        f1 = node("Add", [f1, weight(f"{p}/b1", (ffn,), 0.02)], f"{p}/ffn/fc1_bias")
        # Gelu written as x * 0.5 * (1 + erf(x / sqrt2)) so ORT's GeluFusion has work to do.
        e = node("Div", [f1, "sqrt2"], f"{p}/ffn/gelu_div")
        e = node("Erf", [e], f"{p}/ffn/gelu_erf")
        e = node("Add", [e, "one"], f"{p}/ffn/gelu_add")
        e = node("Mul", [f1, e], f"{p}/ffn/gelu_mul")
        g = node("Mul", [e, "half"], f"{p}/ffn/gelu_half")
        f2 = node("MatMul", [g, weight(f"{p}/W2", (ffn, hidden), 1.0 / np.sqrt(ffn))], f"{p}/ffn/fc2")
        f2 = node("Add", [f2, weight(f"{p}/b2", (hidden,), 0.02)], f"{p}/ffn/fc2_bias")
        x = node("Add", [x, f2], f"{p}/ffn/residual")
    y = node("LayerNormalization", [x, ln_scale, ln_bias], "final_ln", axis=-1, epsilon=1e-5)
    nodes.append(helper.make_node("Identity", [y], ["y"], name="output"))

    graph = helper.make_graph(
        nodes,
        "engine_tuner_demo",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", seq, hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", seq, hidden])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="engine-tuner")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


DEMO_SHAPES = {"x": (8, DEMO_SEQ, DEMO_HIDDEN)}


def write_demo_model(path: str, outliers: int = 0, seed: int = 0) -> str:
    """Write the demo model; `outliers` plants outliers in that many blocks (block 1, then 3, 0, 2)."""
    if not 0 <= outliers <= DEMO_LAYERS:
        raise UserError(f"--outliers {outliers}: the demo model has {DEMO_LAYERS} blocks; pass 0..{DEMO_LAYERS}")
    blocks = (1, 3, 0, 2)[:outliers]
    onnx.save(build_demo_model(outlier_blocks=blocks, seed=seed), path)
    return path
