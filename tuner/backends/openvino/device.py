"""What the OpenVINO CPU plugin offers on this machine (capabilities, its own defaults), and the space
choices that would change nothing here."""
from __future__ import annotations

import functools
import platform
from dataclasses import replace

import numpy as np
import openvino as ov

from ...inputs.space import Param
from ...measure.machine import cpu_flags
from .properties import DEVICE, is_unset

# OpenVINO element type names -> the INFERENCE_PRECISION_HINT spelling the space uses.
_PRECISIONS = {"f32": "f32", "bf16": "bf16", "f16": "f16"}
# A precision hint the plugin has no kernels for is dropped silently (the compiled model reports f32
# and the outputs are bit-identical): offer it only where OPTIMIZATION_CAPABILITIES lists it.
_NEEDS = {"bf16": "BF16", "f16": "FP16"}
# CPU flags of the dynamic-quantization kernels: the plugin uses them only with avx2_vnni or
# avx512_core_vnni (x86) or dot-product instructions (ARM); elsewhere the FullyConnected kernels stay
# f32 whatever DYNAMIC_QUANTIZATION_GROUP_SIZE says (measured: identical outputs, same kernels).
_DQ_FLAGS = {"avx_vnni", "avx512_vnni", "asimddp", "i8mm"}


@functools.lru_cache(maxsize=1)
def plugin_info() -> dict:
    """Capabilities and the defaults the plugin picks with no properties (a tiny model compiled with
    none and asked back), e.g. bf16 inference precision on a CPU with BF16."""
    core = ov.Core()
    x = ov.opset13.parameter([1, 8], np.float32, name="x")
    probe = core.compile_model(ov.Model([ov.opset13.relu(x)], [x], "probe"), DEVICE, {})
    return {
        "name": str(core.get_property(DEVICE, "FULL_DEVICE_NAME")),
        "capabilities": [str(c) for c in core.get_property(DEVICE, "OPTIMIZATION_CAPABILITIES")],
        "inference_precision": _PRECISIONS.get(probe.get_property("INFERENCE_PRECISION_HINT").get_type_name(), "f32"),
        "inference_num_threads": int(probe.get_property("INFERENCE_NUM_THREADS")),
        "enable_cpu_pinning": bool(probe.get_property("ENABLE_CPU_PINNING")),
    }


@functools.lru_cache(maxsize=1)
def has_dynamic_quantization() -> bool:
    flags = cpu_flags()
    return flags is None or bool(flags & _DQ_FLAGS)  # cannot tell: keep the knob


def has_int8_dot_product() -> bool:
    """VNNI (x86) or dot-product (ARM) instructions: int8 products summed without int16 saturation."""
    flags = cpu_flags()
    return flags is not None and bool(flags & _DQ_FLAGS)


def adapt(param: Param) -> tuple[Param | None, str]:
    """The parameter as this CPU can run it (see Backend.adapt in tuner/backends/base.py)."""
    info = plugin_info()
    if param.key == "inference_precision":
        keep = [c for c in param.choices if c not in _NEEDS or _NEEDS[c] in info["capabilities"]]
        if is_unset(param.key, param.default):  # the plugin's own choice stays the default: nothing set
            default = param.default
        else:  # a space without `auto`: the value the plugin picks by itself here
            default = info["inference_precision"] if info["inference_precision"] in keep else (
                param.default if param.default in keep else keep[0])
        dropped = [c for c in param.choices if c not in keep]
        reason = (f"{param.name} {', '.join(dropped)} dropped: OPTIMIZATION_CAPABILITIES is "
                  f"{', '.join(info['capabilities'])} (no {', '.join(_NEEDS[c] for c in dropped)}), so the plugin would "
                  "run them as f32") if dropped else ""
        return replace(param, choices=keep, default=default), reason
    if param.key == "dynamic_quantization_group_size" and not has_dynamic_quantization():
        return None, (f"{param.name} dropped: this {platform.machine()} CPU has no VNNI or dot-product "
                      "instructions, and without them the plugin never quantizes activations on the fly")
    if (param.key in ("inference_num_threads", "enable_cpu_pinning") and param.type != "categorical"
            and not is_unset(param.key, param.default)):  # a space without `auto`: the plugin's own value
        own = info[param.key]
        if param.type == "int":
            own = max(int(param.low), min(int(param.high), own))
        return replace(param, default=own), ""
    return param, ""
