"""The OpenVINO CPU backend: precision routes as NNCF rewrites of the model read from its ONNX file,
compile properties as build settings, engine = export_model() bytes + the properties it was compiled with.

Tested with openvino 2026.4 and nncf 3.4; NNCF is imported only by the routes that use it.
Idle engines do not spin (ten compiled engines timed round-robin ran as fast as one alone), so
BuildContext.side_by_side needs nothing here.
"""
from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version

import numpy as np
import openvino as ov

from ...inputs.model import ModelFile
from ...inputs.space import Param
from ..base import Backend, Batch, BuildContext
from . import device
from .engine import USAGE, OpenVinoEngine, load_engine, write_config
from .profile import node_time_shares
from .properties import DEVICE, FLOAT32, PROPERTIES, compile_properties
from .quantize import QUANTIZING_ROUTES, ROUTE_DEFAULTS, ROUTES, apply_precision, route_variants


class OpenVinoBackend(Backend):
    name = "openvino"
    device = "cpu"
    profiles_nodes = True
    serves_concurrently = True
    routes = ROUTES
    quantizing_routes = QUANTIZING_ROUTES
    float32: dict = FLOAT32
    # An int8 engine as an expert builds it: what stays in float in bf16 where the CPU has BF16 (the space
    # offers the choice only there: device.adapt), AMX/AVX512-BF16 kernels; and static shapes, which let the
    # CPU plugin pick shape-specialised int8 kernels. The hand-built engine of bench/expert_bench.py has both;
    # the default study's int8 variant without them re-timed at 0.92 of it (bench/README.md).
    quantized_settings: dict = {"inference_precision": "bf16", "static_shapes": True}

    def __init__(self) -> None:
        self._core: ov.Core | None = None

    @property
    def core(self) -> ov.Core:
        """Created on first use: versions() and knows() never start the CPU plugin."""
        if self._core is None:
            self._core = ov.Core()
        return self._core

    def versions(self) -> dict[str, str]:
        # Package versions ("2026.4.1"), not ov.get_version()'s build string with slashes;
        # nncf's without importing it.
        out = {"openvino": version("openvino")}
        try:
            out["nncf"] = version("nncf")
        except PackageNotFoundError:
            pass
        return out

    def device_info(self) -> dict:
        info = device.plugin_info()
        return {"device": "cpu", "machine": platform.machine(), "name": info["name"],
                "capabilities": info["capabilities"]}

    def knows(self, parameter: str) -> bool:
        return parameter == "precision" or parameter in PROPERTIES or parameter in ROUTE_DEFAULTS

    def adapt(self, param: Param) -> tuple[Param | None, str]:
        return device.adapt(param)

    def throughput_params(self) -> list[Param]:
        """The performance hint: auto (not set: the CPU plugin's latency hint, one stream) or THROUGHPUT."""
        return [Param("performance_hint", "categorical", "auto", choices=["auto", "THROUGHPUT"])]

    def fixes_shapes(self, config: dict) -> str | None:
        """static_shapes: the model is reshaped to the study's shapes before it is compiled."""
        return "OpenVINO's static_shapes: true" if config.get("static_shapes") else None

    def route_variants(self, route: str, attention: bool) -> list[dict]:
        return route_variants(route, attention, device.has_int8_dot_product())

    def build(self, model: ModelFile, config: dict, ctx: BuildContext) -> OpenVinoEngine:
        config = ROUTE_DEFAULTS | config
        path = apply_precision(self.core, model.path, config, ctx)
        props = compile_properties(config)
        ctx.on_phase("compile")
        # No CACHE_DIR: a compiled model loaded from OpenVINO's compile cache exports a blob that
        # import_model rejects ("Unable to read the model"), and for a file the cache key includes
        # its path, so trials (each in its own folder) never hit it anyway. It would save 0.05-0.25 s
        # of compile time per build; calibration and weight compression, seconds each, it does not cache.
        compiled = self.core.compile_model(path, DEVICE, props)
        outputs = [o.name for o in model.proto.graph.output]
        write_config(ctx.workdir, props, outputs)
        return OpenVinoEngine(compiled, props, outputs)

    def load(self, engine_dir: str) -> OpenVinoEngine:
        return load_engine(self.core, engine_dir)

    def usage(self, engine_dir: str) -> str:
        return USAGE.format(dir=engine_dir)

    def activations(self, model: ModelFile, config: dict, tensors: list[str], batches: list[Batch],
                    ctx: BuildContext) -> list[dict]:
        """The route's model (the ONNX tensor names survive read_model and NNCF) with `tensors` added as
        outputs, compiled with the config's properties."""
        config = ROUTE_DEFAULTS | config
        ov_model = self.core.read_model(apply_precision(self.core, model.path, config, ctx))
        have = {n for op in ov_model.get_ops() for o in op.outputs() for n in o.get_names()}
        ov_model.add_outputs([t for t in dict.fromkeys(tensors) if t in have])
        compiled = self.core.compile_model(ov_model, DEVICE, compile_properties(config))
        request, wanted, out = compiled.create_infer_request(), set(tensors), []
        for batch in batches:
            result = request.infer(batch)
            out.append({name: np.asarray(value, dtype=np.float32)
                        for port, value in result.items() for name in port.get_names() & wanted})
        return out

    def node_times(self, model: ModelFile, batches: list[Batch], workdir: str) -> dict[str, float]:
        return node_time_shares(self.core, model, batches)
