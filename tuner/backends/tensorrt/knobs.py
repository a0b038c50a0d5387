"""The TensorRT build settings a space may name, the API each maps to, and the versions that have it.

Pure: nothing here imports TensorRT. `split_config` drops what the installed version lacks, one line
each, so an unsupported setting is never sent to the builder.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..common.onnx_precision import ROUTE_OPTIONS
from .library import Version, format_version


@dataclass(frozen=True)
class Knob:
    name: str  # the space parameter
    api: str  # what it sets, in the Python API's spelling
    since: Version  # first TensorRT version that has it
    until: Version | None = None  # first version that no longer has it
    default: Any = None  # TensorRT's own default ("auto": left to TensorRT's heuristic)

    def available(self, version: Version) -> bool:
        return self.since <= version and (self.until is None or version < self.until)

    def versions(self) -> str:
        lo = format_version(self.since)
        return f"{lo}-{format_version(self.until)} (excl.)" if self.until else f"{lo}+"


V10, V11 = (10, 0, 0), (11, 0, 0)
ROUTE_PREFIX = "route/"  # route/<knob> parameters: Global Performance Tuner build-route knobs
ROUTES = Knob("route/*", "IBuilderConfig.build_route (knob database: IBuilderConfig.all_build_routes)", (11, 1, 0))

_TACTIC = "IBuilderConfig.set_tactic_sources(mask | 1 << int(TacticSource.{}))"
KNOBS: dict[str, Knob] = {k.name: k for k in (
    Knob("builder_optimization_level", "IBuilderConfig.builder_optimization_level", V10, default=3),
    Knob("tiling_optimization_level",
         "IBuilderConfig.tiling_optimization_level = TilingOptimizationLevel.{NONE,FAST,MODERATE,FULL}",
         (10, 8, 0), default="none"),
    Knob("max_aux_streams", "IBuilderConfig.max_aux_streams", V10, default="auto"),
    Knob("avg_timing_iterations", "IBuilderConfig.avg_timing_iterations", V10, default=1),
    Knob("max_num_tactics", "IBuilderConfig.max_num_tactics", (10, 4, 0), default=-1),
    Knob("tactic_cublas", _TACTIC.format("CUBLAS"), V10, V11, default=False),
    Knob("tactic_cublas_lt", _TACTIC.format("CUBLAS_LT"), V10, V11, default=False),
    Knob("tactic_cudnn", _TACTIC.format("CUDNN"), V10, V11, default=False),
    Knob("tactic_edge_mask_convolutions", _TACTIC.format("EDGE_MASK_CONVOLUTIONS"), V10, default=True),
    Knob("tactic_jit_convolutions", _TACTIC.format("JIT_CONVOLUTIONS"), V10, default=True),
    Knob("tf32", "IBuilderConfig.set_flag/clear_flag(BuilderFlag.TF32)", V10, default=True),
    # Weak typing (precision flags, per-layer precision) exists in 10.x only; 11.x is strongly typed.
    Knob("typing", "weak: no NetworkDefinitionCreationFlag.STRONGLY_TYPED, BuilderFlag.FP16/BF16/INT8, "
         "ILayer.precision + BuilderFlag.OBEY_PRECISION_CONSTRAINTS", V10, V11, default="strong"),
    Knob("pin_tactics", "BuilderFlag.EDITABLE_TIMING_CACHE, ITimingCache.queryKeys/query/update", (10, 8, 0), default=False),
    Knob("timing_cache", "IBuilderConfig.create_timing_cache/set_timing_cache, ITimingCache.serialize/combine", V10,
         default="shared"),
    Knob("cuda_graph", "runtime: cudaStreamBeginCapture/EndCapture around IExecutionContext.execute_async_v3", V10,
         default=False),
)}



def is_route_knob(name: str) -> bool:
    return name.startswith(ROUTE_PREFIX)


def knows(name: str) -> bool:
    """Every name the backend understands, whatever the installed version (spaces stay portable)."""
    return name in KNOBS or name in ROUTE_OPTIONS or is_route_knob(name)


def drop_line(name: str, knob: Knob, version: Version, value: Any) -> str:
    return (f"tensorrt {format_version(version)} has no {name} ({knob.api}; TensorRT {knob.versions()}): "
            f"{name}={value} not set")


def split_config(config: dict[str, Any], version: Version) -> tuple[dict[str, Any], list[str]]:
    """(the settings this version has, one line per dropped one)."""
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for name, value in config.items():
        knob = ROUTES if is_route_knob(name) else KNOBS.get(name)
        if knob is not None and not knob.available(version):
            dropped.append(drop_line(name, knob, version, value))
        else:
            kept[name] = value
    return kept, dropped


def unsupported(names: list[str], version: Version) -> list[str]:
    """The parameters of a space that this version would drop: a space can be pruned before a study."""
    gated = [(n, ROUTES if is_route_knob(n) else KNOBS.get(n)) for n in names]
    return [n for n, knob in gated if knob is not None and not knob.available(version)]
