"""The TensorRT backend (NVIDIA GPU): precision routes as ONNX rewrites, builder-config knobs and build
routes as build settings, engine = serialised plan + tensorrt_config.json.

Written against the TensorRT Python API of 10.x and 11.x and NOT YET RUN ON A GPU by this project:
only its pure parts (knob tables, build routes, rewrites, messages) are checked, on a CPU.
`import tensorrt` happens when the backend object is made, so this module imports everywhere and a
machine without TensorRT or without a GPU gets one line that says what is missing.
"""
from __future__ import annotations

import json
import logging
import os
from typing import Any

from ...errors import UserError
from ...inputs.model import ModelFile, save_model
from ..base import Backend, BuildContext
from ..common.cuda_rt import DeviceRuntime, load_runtime
from ..common.onnx_precision import BLOCK_LISTS, ROUTES, apply_precision
from . import timing_cache as tc
from .build import CacheSetup, build_plan
from .engine import CONFIG_FILE, PLAN_FILE, TrtEngine
from .knobs import knows, split_config
from .library import import_tensorrt, version_of
from .routes import KnobDatabase, parse_knob_database

log = logging.getLogger("tuner.backends.tensorrt")

QUANTIZING_ROUTES = ("int8", "fp16", "bf16")  # routes that take a per-layer keep-in-float list

USAGE = """import json, numpy as np, tensorrt as trt
from cuda.bindings import runtime as cudart  # pip install cuda-python
runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
engine = runtime.deserialize_cuda_engine(open("{dir}/{plan}", "rb").read())
context = engine.create_execution_context()
_, stream = cudart.cudaStreamCreate()
names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
outs, buffers = [], []
for name in names:  # inputs: {{input name: numpy array}} in the engine's input types
    if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
        host = np.ascontiguousarray(inputs[name], dtype=trt.nptype(engine.get_tensor_dtype(name)))
        context.set_input_shape(name, host.shape)
    else:
        host = np.empty(tuple(context.get_tensor_shape(name)), dtype=trt.nptype(engine.get_tensor_dtype(name)))
        outs.append(host)
    _, ptr = cudart.cudaMalloc(max(host.nbytes, 1)); buffers.append(ptr)
    context.set_tensor_address(name, ptr)
    if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
        cudart.cudaMemcpy(ptr, host.ctypes.data, host.nbytes, cudart.cudaMemcpyKind.cudaMemcpyHostToDevice)
context.execute_async_v3(stream)
cudart.cudaStreamSynchronize(stream)
out_ptrs = [p for n, p in zip(names, buffers) if engine.get_tensor_mode(n) != trt.TensorIOMode.INPUT]
for host, ptr in zip(outs, out_ptrs):
    cudart.cudaMemcpy(host.ctypes.data, ptr, host.nbytes, cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost)
outputs = outs  # settings it was built with: {dir}/{config}"""


class TensorRTBackend(Backend):
    name = "tensorrt"
    device = "cuda:0"
    routes = ROUTES
    quantizing_routes = QUANTIZING_ROUTES
    float32: dict = {"tf32": False}  # TF32 is on by default

    def __init__(self) -> None:
        self.trt = import_tensorrt()  # one line naming what to install when it does not load
        self.version = version_of(self.trt)
        try:
            self.cuda: DeviceRuntime = load_runtime(int(self.device.partition(":")[2] or 0))
        except UserError as exc:  # no GPU, no driver, or no cuda-python: one line
            raise UserError(f"backend tensorrt: {exc}") from None

    # ------------------------------------------------------------------ what the tuner asks

    def versions(self) -> dict[str, str]:
        """TensorRT, the CUDA driver and runtime, and the GPU model."""
        return {"tensorrt": self.trt.__version__, **self.cuda.versions()}

    def device_info(self) -> dict:
        return self.cuda.device_info()

    def knows(self, parameter: str) -> bool:
        return knows(parameter)

    def knob_database_json(self) -> str:
        """IBuilderConfig.all_build_routes of the installed TensorRT: "" before 11.1, and on platforms
        without the Global Performance Tuner (TensorRT-RTX, Windows)."""
        if self.version < (11, 1, 0):
            return ""
        builder = self.trt.Builder(self.trt.Logger(self.trt.Logger.WARNING))
        return str(builder.create_builder_config().all_build_routes or "")

    def knob_database(self) -> KnobDatabase:
        return parse_knob_database(self.knob_database_json())

    # ------------------------------------------------------------------ the build

    def fixes_shapes(self, config: dict) -> str | None:
        """Its one optimisation profile has min = opt = max = the study's shape (build.add_profile); for a workload of
        several sets, min and max span the sets, so the engine serves the shapes between them."""
        return "TensorRT's optimisation profile (min = opt = max, or the workload's range)"

    def build(self, model: ModelFile, config: dict, ctx: BuildContext) -> TrtEngine:
        settings, dropped = split_config(config, self.version)
        for line in dropped:  # a knob this TensorRT lacks is never sent
            log.warning(line)
        route, weak = settings.get("precision", "fp32"), settings.get("typing", "strong") == "weak"
        ctx.on_phase("calibration" if route == "int8" else f"rewrite ({route})")
        graph = model.proto if weak and route in ("fp16", "bf16") else apply_precision(
            model.proto, settings, ctx.calib, self._calib_cache(ctx, settings))
        model_path = os.path.join(ctx.workdir, "model.onnx")
        save_model(graph, model_path)
        ctx.on_phase("compile")
        result = build_plan(self.trt, self.version, model_path, settings, ctx.shapes, self._cache_setup(model, settings, ctx),
                            self._weak_keep(model, settings) if weak else (), ctx.workload)
        os.remove(model_path)  # the plan is the engine; the rewritten graph was only its input
        for line in result.notes:
            log.info(line)
        extra = {}
        if result.cache_bytes:
            extra[tc.CACHE_FILE] = result.cache_bytes
        if result.tactics:
            extra[tc.TACTICS_FILE] = tc.encode_tactics(result.tactics, {"tensorrt": self.trt.__version__}).encode()
        ctx.on_phase("engine load")
        record = dict(settings, tensorrt=self.trt.__version__, notes=dropped + result.notes)
        engine = TrtEngine(self.trt, result.plan, record, self.cuda, extra)
        engine.save(ctx.workdir)
        return engine

    def load(self, engine_dir: str) -> TrtEngine:
        plan, cfg = os.path.join(engine_dir, PLAN_FILE), os.path.join(engine_dir, CONFIG_FILE)
        if not (os.path.isfile(plan) and os.path.isfile(cfg)):
            raise ValueError(f"{engine_dir}: not a tensorrt engine ({PLAN_FILE} and {CONFIG_FILE} expected)")
        with open(plan, "rb") as f, open(cfg) as g:
            return TrtEngine(self.trt, f.read(), json.load(g), self.cuda, {})

    def usage(self, engine_dir: str) -> str:
        return USAGE.format(dir=engine_dir, plan=PLAN_FILE, config=CONFIG_FILE)

    def measured(self, model: ModelFile, ctx: BuildContext, median_ms: float, feasible: bool) -> None:
        """Told after an engine's timing (tuner.execute.evaluate): the fastest feasible engine so far gives its
        tactics to later trials with pin_tactics=true."""
        if feasible:
            tc.offer_best(ctx.workdir, self._scope(model, ctx), median_ms)

    # ------------------------------------------------------------------ helpers

    def _scope(self, model: ModelFile, ctx: BuildContext) -> str:
        """The study's cache folder for this TensorRT and GPU (outside a study: the model's)."""
        gpu = str(self.cuda.device_info().get("name", "gpu"))
        return tc.scope_dir(ctx.cache_dir, ctx.study or f"model-{model.hash}", self.trt.__version__, gpu)

    def _cache_setup(self, model: ModelFile, settings: dict[str, Any], ctx: BuildContext) -> CacheSetup:
        scope = self._scope(model, ctx)
        shared = os.path.join(scope, tc.SHARED_FILE) if settings.get("timing_cache", "shared") == "shared" else ""
        best = tc.read_bytes(os.path.join(scope, tc.BEST_CACHE)) if settings.get("pin_tactics") else b""
        return CacheSetup(shared, best, editable="pin_tactics" in settings)

    @staticmethod
    def _calib_cache(ctx: BuildContext, settings: dict[str, Any]) -> str | None:
        if settings.get("precision") != "int8" or not ctx.calib_key:
            return None
        os.makedirs(ctx.cache_dir, exist_ok=True)
        # Its own file: the ranges depend on the op types calibrated, which differ from ONNX Runtime's route.
        method, ops = settings.get("int8_calibration", "MinMax"), settings.get("int8_op_types", "weighted")
        return os.path.join(ctx.cache_dir, f"calib-{ctx.calib_key}-{method}-trt-{ops}.json")

    @staticmethod
    def _weak_keep(model: ModelFile, settings: dict[str, Any]) -> list[str]:
        """10.x weak typing: the nodes to pin to fp32 (keep_float plus the block list's op types)."""
        ops = set(BLOCK_LISTS[settings.get("lowp_block_list", "none")])
        return list(settings.get("keep_float", [])) + [n for n, op in model.nodes if op in ops]


__all__ = ["TensorRTBackend"]
