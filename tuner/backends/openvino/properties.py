"""OpenVINO CPU compile properties from a config: each space knob's OpenVINO spelling, and the fixed ones."""
from __future__ import annotations

from typing import Any

DEVICE = "CPU"

# Space knob (config key) -> compile property. Values go in as strings ("YES"/"NO", "bf16", "2"),
# which is also how they are saved next to an exported engine.
PROPERTIES = {
    "inference_precision": "INFERENCE_PRECISION_HINT",  # ov.properties.hint.inference_precision: f32 | bf16 | f16
    "inference_num_threads": "INFERENCE_NUM_THREADS",  # ov.properties.inference_num_threads: 1..cores
    "enable_cpu_pinning": "ENABLE_CPU_PINNING",  # ov.properties.hint.enable_cpu_pinning
    # ov.properties.hint.dynamic_quantization_group_size: int8 activations on the fly for
    # weight-compressed MatMuls (0 = off); only CPUs with VNNI (or ARM dot-product) kernels use it.
    "dynamic_quantization_group_size": "DYNAMIC_QUANTIZATION_GROUP_SIZE",
    # ov.properties.hint.performance_mode: offered only where a study measures throughput (--throughput:
    # OpenVinoBackend.throughput_params); THROUGHPUT splits the cores into streams that run requests side by side.
    "performance_hint": "PERFORMANCE_HINT",
}
# Not set: the latency hint with one stream (ov.properties.hint.performance_mode, ov.properties.num_streams),
# the CPU plugin's own defaults: the tuner times one synchronous request (two streams split the cores: one
# request ran 1.7-1.8x slower). ENABLE_CPU_RESERVATION is never set: while one compiled model holds it,
# every other compile_model in the process fails.
# A knob at `auto` (0 for the thread count) is not set at all: the plugin's own choice, as with no
# properties. The defaults trial (every knob at its default) is then compile_model(model, "CPU") with nothing set.
# The knobs of an engine that computes in float32 throughout: without the hint the plugin picks its own
# precision, bf16 on a CPU with BF16.
FLOAT32 = {"inference_precision": "f32"}


def is_unset(key: str, value: Any) -> bool:
    """The knob is left to the plugin: `auto`, or 0 threads (0 is also OpenVINO's own "auto" for it)."""
    return value == "auto" or (key == "inference_num_threads" and value == 0)


def compile_properties(config: dict[str, Any]) -> dict[str, str]:
    """The compile properties of a normalized config (strings, JSON-ready); {} for the plugin untouched."""
    props = {}
    for key, prop in PROPERTIES.items():
        if key in config and not is_unset(key, config[key]):
            value = config[key]
            props[prop] = ("YES" if value else "NO") if isinstance(value, bool) else str(value)
    return props
