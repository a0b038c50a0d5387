"""ONNX Runtime's precision routes: ONNX -> ONNX rewrites with its own quantization tooling (int8, int4, fp16)."""
from __future__ import annotations

import copy
import logging
import os
from typing import Any

import onnx

from ...inputs.data import Batch
from ...inputs.model import constants_to_initializers, ensure_opset, save_model
from ..common.calibration import FP16_BLOCK_LISTS, BatchReader, quiet_tools

ROUTES = ("fp32", "int8-dynamic", "int8-static", "int4-weight", "fp16")
QUANTIZING_ROUTES = ("int8-dynamic", "int8-static", "int4-weight")
# A route option that a (smaller) space file leaves out takes ONNX Runtime's own default.
ROUTE_DEFAULTS = {
    "dyn_per_channel": False, "dyn_reduce_range": False, "dyn_weight_type": "QInt8",
    "calibration_method": "MinMax", "static_per_channel": False, "activation_type": "QUInt8", "weight_type": "QInt8",
    "int4_accuracy_level": 0, "int4_block_size": 128, "fp16_keep_io_types": True, "fp16_block_list": "none",
    "quant_op_types": "all",
}
# The op types the int8 routes quantize. `weights`: only the ops that carry weights, the usual int8
# recipe for transformers; it keeps an attention mask's Add and Softmax out of calibration (a mask of
# -inf gives the histogram calibrators "range [-inf, inf] is not finite"). `all`: ORT's own set.
QUANT_OP_TYPES = {"weights": ["MatMul", "Gemm", "Conv"], "all": None}

logging.getLogger("onnxruntime.quantization").setLevel(logging.ERROR)


def route_variants(route: str, attention: bool) -> list[dict[str, Any]]:
    """The accuracy-relevant option sets of `route` worth one all-quantized build each before layers are
    ranked (tuner.analysis.variants), as config keys; {} = the space's defaults. One option changed at a time
    (a handful of builds, not the product): per-channel weights, 7-bit weights (reduce_range: no int16
    saturation on CPUs without VNNI), every op type ORT quantizes; static: the histogram calibrators
    (with per-channel weights, the usual pairing) besides MinMax."""
    if route == "int8-dynamic":
        return [{}, {"dyn_per_channel": True}, {"dyn_reduce_range": True}, {"quant_op_types": "all"}]
    if route == "int8-static":
        return [{}, {"static_per_channel": True}, {"calibration_method": "Entropy", "static_per_channel": True},
                {"calibration_method": "Percentile", "static_per_channel": True}]
    return [{}]


def _qtype(name: str):
    from onnxruntime.quantization import QuantType

    return getattr(QuantType, name)


def apply_precision(
    model: onnx.ModelProto, config: dict[str, Any], workdir: str, calib: list[Batch], cache_dir: str, calib_key: str
) -> str:
    """Write the transformed model under workdir and return its path."""
    with quiet_tools():
        return _apply(model, config, workdir, calib, cache_dir, calib_key)


def _apply(model, config, workdir, calib, cache_dir, calib_key) -> str:
    config = ROUTE_DEFAULTS | config
    route = config.get("precision", "fp32")
    # ORT's int4 and fp16 converters edit the proto in place: never let them touch the shared original.
    model = copy.deepcopy(model)
    src = os.path.join(workdir, "input.onnx")
    out = os.path.join(workdir, "model.onnx")
    exclude = config.get("keep_float", [])
    if route == "fp32":
        save_model(model, out)
        return out
    # ORT's quantizers read weights from initializers only; exporters such as paddle2onnx write
    # them as Constant nodes ("Expected conv2d_157.w_0 to be an initializer").
    constants_to_initializers(model)
    if route == "int8-dynamic":
        from onnxruntime.quantization import quantize_dynamic

        model = ensure_opset(model, 13 if config.get("dyn_per_channel") else 11)
        save_model(model, src)
        quantize_dynamic(src, out, per_channel=config["dyn_per_channel"], reduce_range=config["dyn_reduce_range"],
                         weight_type=_qtype(config["dyn_weight_type"]), nodes_to_exclude=exclude,
                         op_types_to_quantize=QUANT_OP_TYPES[config["quant_op_types"]])
        return out
    if route == "int8-static":
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, quantize_static

        model = ensure_opset(model, 13)
        save_model(model, src)
        method, op_types = config["calibration_method"], config["quant_op_types"]
        # Tensor ranges depend only on the model, calibration data, method and the tensors ranged
        # (the quantized op types): computed once, reused.
        suffix = "" if op_types == "all" else f"-{op_types}"
        cache = os.path.join(cache_dir, f"calib-{calib_key}-{method}{suffix}.json")
        quantize_static(src, out, BatchReader(calib) if not os.path.isfile(cache) else None, quant_format=QuantFormat.QDQ,
                        per_channel=config["static_per_channel"], activation_type=_qtype(config["activation_type"]),
                        weight_type=_qtype(config["weight_type"]), nodes_to_exclude=exclude,
                        op_types_to_quantize=QUANT_OP_TYPES[op_types],
                        calibrate_method=getattr(CalibrationMethod, method), calibration_cache_path=cache)
        return out
    if route == "int4-weight":
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        level = config["int4_accuracy_level"] or None
        q = MatMulNBitsQuantizer(model, bits=4, block_size=config["int4_block_size"], is_symmetric=True,
                                 accuracy_level=level, nodes_to_exclude=exclude)
        q.process()
        save_model(q.model.model, out)
        return out
    if route == "fp16":
        from onnxruntime.transformers.float16 import convert_float_to_float16

        m = convert_float_to_float16(model, keep_io_types=config["fp16_keep_io_types"],
                                     op_block_list=FP16_BLOCK_LISTS[config["fp16_block_list"]] or None)
        save_model(m, out)
        return out
    raise ValueError(f"unknown precision route {route!r}; onnxruntime realises {', '.join(ROUTES)}")
