"""OpenVINO's precision routes: the ONNX file read into an OpenVINO model, reshaped, rewritten by NNCF
(int8, int8-weight, int4-weight) and saved as IR for compile_model."""
from __future__ import annotations

import contextlib
import io
import logging
import os
from typing import Any

import openvino as ov

from ..base import Batch, BuildContext

ROUTES = ("fp32", "int8", "int8-weight", "int4-weight")
QUANTIZING_ROUTES = ("int8", "int8-weight", "int4-weight")
# A route option that a (smaller) space file leaves out takes NNCF's own default.
ROUTE_DEFAULTS: dict[str, Any] = {
    # ov.Model.reshape to the study's shapes; off = the model file's own (possibly dynamic) dimensions,
    # which is what compile_model("model.onnx") gives.
    "static_shapes": False,
    "int8_model_type": "none",  # nncf.quantize(model_type=None | nncf.ModelType.TRANSFORMER)
    "int8_smooth_quant": True,  # SmoothQuant runs only with model_type transformer
    "int8_preset": None,  # nncf.QuantizationPreset performance | mixed; None = NNCF's (mixed for transformer)
    "int8_overflow_fix": "first_layer",  # nncf OverflowFix
    "int8_weight_mode": "int8_asym",  # nncf.CompressWeightsMode for int8-weight
    "int4_mode": "int4_sym",  # nncf.CompressWeightsMode for int4-weight
    "int4_group_size": 128,
}
_OVERFLOW_FIX = {"disable": "disable", "first_layer": "first_layer_only", "enable": "enable"}
IR_FILE = "model.xml"


def route_variants(route: str, attention: bool, vnni: bool) -> list[dict[str, Any]]:
    """The accuracy-relevant option sets of `route` worth one all-quantized build each before layers are
    ranked (tuner.analysis.variants), as config keys; {} = the space's defaults. A handful, not the product:
    - NNCF's presets and the overflow fix where it matters: off on a CPU with VNNI (its u8*s8 sums cannot
      saturate, so the 7-bit weights of the first layer only cost accuracy), on everywhere without VNNI;
    - where the graph may hold attention (a Softmax and a MatMul: a pattern would be a guess about
      exporters), model type TRANSFORMER too: SmoothQuant off with both presets (layers kept in float need
      it off: its scaling stays in place on an ignored layer, which made a real encoder worse, error 1.03,
      as more layers stayed in float), and SmoothQuant on once, for the table and for TPE (the space keeps
      no layer in float under it)."""
    if route != "int8":
        return [{}]
    overflow = {"int8_overflow_fix": "disable" if vnni else "enable"}
    plain = [{}, {"int8_preset": "mixed"}, overflow]
    if not attention:
        return plain
    transformer = {"int8_model_type": "transformer", "int8_smooth_quant": False}
    return [{}, transformer | {"int8_preset": "mixed"}, transformer | {"int8_preset": "performance"},
            transformer | {"int8_preset": "mixed"} | overflow,
            {"int8_model_type": "transformer", "int8_smooth_quant": True, "int8_preset": "mixed"}] + plain[1:]


def read_model(core: ov.Core, path: str, shapes: dict[str, tuple[int, ...]] | None) -> ov.Model:
    """core.read_model of the ONNX file (ONNX node names become friendly names), reshaped to `shapes`
    where given: static shapes compile to faster kernels (1.2x on PP-OCRv4 det) and NNCF calibrates
    with them. read_model, not ov.convert_model: 10-20x faster, the same engine."""
    model = core.read_model(path)
    if shapes:
        names = {n for p in model.inputs for n in p.get_names()}
        todo = {k: list(v) for k, v in shapes.items() if k in names}
        if todo:
            model.reshape(todo)
    return model


def _nncf():
    import nncf  # 0.5-0.8 s: only the routes that use it pay

    nncf.set_log_level(logging.ERROR)  # per-algorithm INFO tables
    return nncf


@contextlib.contextmanager
def _no_progress_bars():
    """NNCF draws rich progress bars on stdout whatever its log level."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def _ignored_scope(nncf, names: list[str]):
    """Keep-in-float nodes by ONNX node name (they survive read_model as friendly names).
    validate=False: a name the graph lacks, or that the route never touches, is skipped instead of
    failing the build (a keep list is made for every route of a space)."""
    return nncf.IgnoredScope(names=list(names), validate=False) if names else None


def quantize_int8(model: ov.Model, config: dict[str, Any], calib: list[Batch]) -> ov.Model:
    """Static int8 (activations and weights), NNCF post-training quantization."""
    nncf = _nncf()
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, AdvancedSmoothQuantParameters, OverflowFix

    if not calib:
        raise ValueError("the int8 route needs calibration batches")
    transformer = config["int8_model_type"] == "transformer"
    advanced = AdvancedQuantizationParameters(overflow_fix=OverflowFix(_OVERFLOW_FIX[config["int8_overflow_fix"]]))
    if transformer and not config["int8_smooth_quant"]:
        # A negative alpha turns SmoothQuant off. Searched, never fixed, but off wherever layers stay in
        # float (the spaces' `unless` on the keep-float list): its scaling stays in place when a layer is
        # in the ignored scope, which broke per-layer reverts on a real encoder (1.03 with one layer in
        # float, against 0.0103 with SmoothQuant off).
        advanced.smooth_quant_alphas = AdvancedSmoothQuantParameters(convolution=-1, matmul=-1)
    preset = config["int8_preset"]
    return nncf.quantize(
        model, nncf.Dataset(calib),  # each item a {input name: array} batch, as an infer request takes
        preset=nncf.QuantizationPreset(preset) if preset else None,
        subset_size=len(calib),
        model_type=nncf.ModelType.TRANSFORMER if transformer else None,
        ignored_scope=_ignored_scope(nncf, config.get("keep_float", [])),
        advanced_parameters=advanced)


def compress_weights(model: ov.Model, config: dict[str, Any]) -> ov.Model:
    """Weight-only int8 / int4 (data-free); activations stay float."""
    nncf = _nncf()
    ignored = _ignored_scope(nncf, config.get("keep_float", []))
    if config["precision"] == "int8-weight":
        return nncf.compress_weights(model, mode=nncf.CompressWeightsMode(config["int8_weight_mode"]),
                                     ignored_scope=ignored)
    from nncf.quantization.advanced_parameters import AdvancedCompressionParameters, GroupSizeFallbackMode

    # ADJUST: a layer whose input channels the group size does not divide gets a smaller group, else
    # int8; NNCF's default fails the whole build ("Failed to apply group-wise quantization ...").
    advanced = AdvancedCompressionParameters(group_size_fallback_mode=GroupSizeFallbackMode.ADJUST)
    return nncf.compress_weights(model, mode=nncf.CompressWeightsMode(config["int4_mode"]),
                                 group_size=int(config["int4_group_size"]), ratio=1.0, ignored_scope=ignored,
                                 advanced_parameters=advanced)


def apply_precision(core: ov.Core, model_path: str, config: dict[str, Any], ctx: BuildContext) -> str:
    """The file compile_model reads: the ONNX file itself for fp32 without reshaping (what "just use
    OpenVINO" compiles), else the route's IR written to ctx.workdir."""
    route = config.get("precision", "fp32")
    if route not in ROUTES:
        raise ValueError(f"unknown precision route {route!r}; openvino realises {', '.join(ROUTES)}")
    if route == "fp32" and not config["static_shapes"]:
        return model_path
    model = read_model(core, model_path, ctx.shapes if config["static_shapes"] else None)
    if route == "int8":
        ctx.on_phase("calibration")
        with _no_progress_bars():
            model = quantize_int8(model, config, ctx.calib)
    elif route != "fp32":
        ctx.on_phase(f"build ({route})")
        with _no_progress_bars():
            model = compress_weights(model, config)
    out = os.path.join(ctx.workdir, IR_FILE)
    # compress_to_fp16=False: the default stores float weights as f16, a silent precision change
    # (3-7% slower here, error 1e-7..1e-6) that the fp32 route must not make.
    ov.save_model(model, out, compress_to_fp16=False)
    return out
