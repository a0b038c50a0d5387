"""ONNX file -> serialised TensorRT plan: network, parser, profile, builder config, timing cache, build.

Every function takes the `tensorrt` module as `trt` (never imports it). The decisions that need no
TensorRT (which network flag, which tactic bits, the parser's one-line error, layer-name matching)
are pure functions, checked on the CPU; everything that calls TensorRT has not run on a GPU yet.
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ...errors import UserError
from .knobs import is_route_knob
from .library import Version
from .routes import parse_knob_database, route_string
from .timing_cache import attach, merge_into_file, pin, read_bytes, snapshot

TACTIC_KNOBS = {
    "tactic_cublas": "CUBLAS", "tactic_cublas_lt": "CUBLAS_LT", "tactic_cudnn": "CUDNN",
    "tactic_edge_mask_convolutions": "EDGE_MASK_CONVOLUTIONS", "tactic_jit_convolutions": "JIT_CONVOLUTIONS",
}
WEAK_FLAGS = {"fp16": "FP16", "bf16": "BF16", "int8": "INT8"}


# ------------------------------------------------------------------------------------------ logging


def make_logger(trt):
    """A trt.ILogger that keeps the builder's errors (for one-line failure messages) and drops the rest."""

    class _Logger(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)
            self.errors: list[str] = []

        def log(self, severity, msg):
            if severity in (trt.ILogger.Severity.ERROR, trt.ILogger.Severity.INTERNAL_ERROR):
                self.errors.append(str(msg))

    return _Logger()


# ------------------------------------------------------------------------------------------ network


def wants_strongly_typed_flag(version: Version, typing: str = "strong") -> bool:
    """Whether createNetworkV2 gets NetworkDefinitionCreationFlag.STRONGLY_TYPED. 10.x: it is opt-in
    (EXPLICIT_BATCH is deprecated and ignored: networks are always explicit batch since 10.0). 11.x:
    strong typing is always on, STRONGLY_TYPED is deprecated and ignored, EXPLICIT_BATCH is gone."""
    return version < (11, 0, 0) and typing == "strong"


def network_flags(trt, version: Version, typing: str = "strong") -> int:
    if not wants_strongly_typed_flag(version, typing):
        return 0
    return 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)


def parser_error_line(path: str, errors: list[dict[str, str]]) -> str:
    """One line for the ONNX parser's errors: the first with its node, and how many more."""
    if not errors:
        return f"TensorRT could not parse {path} (no error reported); check the model with onnx.checker"
    e = errors[0]
    where = f" at node {e['node']!r} ({e['op']})" if e.get("node") else ""
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return (f"TensorRT could not parse {os.path.basename(path)}{where}: {e['desc']}{more}; "
            "`polygraphy inspect capability` lists the nodes TensorRT does not support")


def parse_onnx(trt, network, logger, path: str) -> None:
    parser = trt.OnnxParser(network, logger)
    if parser.parse_from_file(path):  # a file, so external data next to it is found
        return
    errors = []
    for i in range(parser.num_errors):
        e = parser.get_error(i)
        errors.append({"desc": str(e.desc()), "node": str(e.node_name()), "op": str(e.node_operator())})
    raise UserError(parser_error_line(path, errors))


def dynamic_inputs(network) -> list[str]:
    return [network.get_input(i).name for i in range(network.num_inputs) if -1 in tuple(network.get_input(i).shape)]


def add_profile(builder, network, bconfig, shapes: dict[str, tuple[int, ...]],
                workload: list[dict[str, tuple[int, ...]]] | None = None) -> None:
    """One optimisation profile for the inputs with dynamic dims: min = opt = max = the study's shape, or for a
    workload of several sets, min and max each dimension's smallest and largest over the sets, opt the first set's."""
    names = dynamic_inputs(network)
    if not names:
        return
    missing = [n for n in names if n not in shapes]
    if missing:
        raise UserError(f"input {missing[0]!r} has dynamic dimensions; give its shape, e.g. --shape {missing[0]}=8x128")
    profile = builder.create_optimization_profile()
    sets = workload or [shapes]
    for name in names:
        low = tuple(min(dims) for dims in zip(*(s[name] for s in sets)))
        high = tuple(max(dims) for dims in zip(*(s[name] for s in sets)))
        profile.set_shape(name, low, shapes[name], high)
    bconfig.add_optimization_profile(profile)


# ------------------------------------------------------------------------------------------ builder config


def tactic_bits(trt) -> dict[str, int]:
    """tactic_* knob -> its bit position in the installed module's TacticSource (positions differ:
    EDGE_MASK_CONVOLUTIONS is bit 3 in 10.x and bit 0 in 11.x, so they are never constants here)."""
    return {knob: int(getattr(trt.TacticSource, source)) for knob, source in TACTIC_KNOBS.items()
            if hasattr(trt.TacticSource, source)}


def tactic_mask(bits: dict[str, int], current: int, settings: dict[str, Any]) -> int:
    """The tactic-source bitmask after the settings' tactic_* knobs (knobs without a bit are dropped
    earlier, by knobs.split_config)."""
    mask = current
    for knob, position in bits.items():
        if knob in settings:
            bit = 1 << position
            mask = mask | bit if settings[knob] else mask & ~bit
    return mask


def apply_settings(trt, bconfig, settings: dict[str, Any]) -> None:
    """The builder-config knobs of a config (already filtered for the installed version)."""
    if "builder_optimization_level" in settings:
        bconfig.builder_optimization_level = int(settings["builder_optimization_level"])
    if "tiling_optimization_level" in settings:
        bconfig.tiling_optimization_level = getattr(trt.TilingOptimizationLevel,
                                                    str(settings["tiling_optimization_level"]).upper())
    if settings.get("max_aux_streams", "auto") != "auto":
        bconfig.max_aux_streams = int(settings["max_aux_streams"])
    if "avg_timing_iterations" in settings:
        bconfig.avg_timing_iterations = int(settings["avg_timing_iterations"])
    if "max_num_tactics" in settings:
        bconfig.max_num_tactics = int(settings["max_num_tactics"])
    if any(k in settings for k in TACTIC_KNOBS):
        bconfig.set_tactic_sources(tactic_mask(tactic_bits(trt), int(bconfig.get_tactic_sources()), settings))
    if "tf32" in settings:
        (bconfig.set_flag if settings["tf32"] else bconfig.clear_flag)(trt.BuilderFlag.TF32)


def apply_route(bconfig, settings: dict[str, Any]) -> tuple[str, list[str]]:
    """Set IBuilderConfig.build_route from the route/ parameters (11.1+). Returns (route, dropped lines)."""
    if not any(is_route_knob(k) for k in settings):
        return "", []
    db = parse_knob_database(bconfig.all_build_routes)
    route, dropped = route_string(settings, db)
    if route:
        bconfig.build_route = route
        if bconfig.build_route != route:
            raise RuntimeError(f"TensorRT did not take build route {route!r} (it reads back "
                               f"{bconfig.build_route!r}); `tuner routes` lists the knobs it accepts")
    return route, dropped


def matches(layer_name: str, nodes: set[str]) -> bool:
    """Whether a TensorRT layer comes from one of the ONNX nodes (the parser names layers after their
    node, with a suffix when one node becomes several layers). Unverified on a GPU."""
    return layer_name in nodes or any(layer_name.startswith(n + s) for n in nodes for s in ("_", "/", "."))


def apply_weak_precision(trt, network, bconfig, route: str, keep: Iterable[str]) -> int:
    """10.x weak typing: the route's precision flag, and the kept nodes' layers pinned to fp32 with
    ILayer.precision / set_output_type + OBEY_PRECISION_CONSTRAINTS. Returns how many layers were pinned."""
    if route in WEAK_FLAGS:
        bconfig.set_flag(getattr(trt.BuilderFlag, WEAK_FLAGS[route]))
    keep = set(keep)
    if not keep or route == "fp32":
        return 0
    pinned = 0
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        if matches(layer.name, keep):
            layer.precision = trt.float32
            for j in range(layer.num_outputs):
                layer.set_output_type(j, trt.float32)
            pinned += 1
    if pinned:
        bconfig.set_flag(trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
    return pinned


# ------------------------------------------------------------------------------------------ the build


@dataclass
class BuildResult:
    plan: bytes
    notes: list[str] = field(default_factory=list)  # one line each: dropped knobs, route, pinned layers
    route: str = ""
    cache_bytes: bytes = b""  # the timing cache after the build (empty when none was attached)
    tactics: dict[str, tuple[int, float]] = field(default_factory=dict)


@dataclass
class CacheSetup:
    shared_path: str = ""  # the study's shared timing cache ("" = none)
    best_bytes: bytes = b""  # the best engine's timing cache, for pin_tactics
    editable: bool = False  # BuilderFlag.EDITABLE_TIMING_CACHE (records tactics; 10.8+)


def build_plan(trt, version: Version, model_path: str, settings: dict[str, Any], shapes: dict[str, tuple[int, ...]],
               cache: CacheSetup, weak_keep: Iterable[str] = (),
               workload: list[dict[str, tuple[int, ...]]] | None = None) -> BuildResult:
    logger = make_logger(trt)
    builder = trt.Builder(logger)
    typing = settings.get("typing", "strong")
    network = builder.create_network(network_flags(trt, version, typing))
    parse_onnx(trt, network, logger, model_path)
    bconfig = builder.create_builder_config()
    add_profile(builder, network, bconfig, shapes, workload)
    apply_settings(trt, bconfig, settings)
    notes: list[str] = []
    if typing == "weak":
        n = apply_weak_precision(trt, network, bconfig, settings.get("precision", "fp32"), weak_keep)
        notes.append(f"weak typing: {settings.get('precision', 'fp32')} flag, {n} layer(s) pinned to fp32")
    route, dropped = apply_route(bconfig, settings)
    notes += dropped + ([f"build route: {route}"] if route else [])
    tcache = None
    if cache.shared_path or cache.best_bytes or cache.editable:
        if cache.editable:
            bconfig.set_flag(trt.BuilderFlag.EDITABLE_TIMING_CACHE)
        tcache = attach(trt, bconfig, read_bytes(cache.shared_path) if cache.shared_path else b"")
        if cache.best_bytes:
            notes.append(f"pinned {pin(trt, bconfig, tcache, cache.best_bytes)} tactic(s) of the best engine")
    plan = builder.build_serialized_network(network, bconfig)
    if plan is None:
        last = logger.errors[-1] if logger.errors else "no error logged"
        raise RuntimeError(f"TensorRT build failed: {last.splitlines()[0] if last else last}")
    result = BuildResult(bytes(plan), notes, route)
    if tcache is not None:
        result.cache_bytes = bytes(tcache.serialize())
        if cache.editable:
            result.tactics = snapshot(tcache)
        if cache.shared_path:
            merge_into_file(trt, bconfig, tcache, cache.shared_path)
    return result
