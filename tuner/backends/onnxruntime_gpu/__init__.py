"""ONNX Runtime on an NVIDIA GPU (backend "onnxruntime-gpu"): its TensorRT or CUDA execution provider,
precision routes as the TensorRT backend's ONNX rewrites, engine = the rewritten model file + the
provider options (session_options.json).

NOT YET RUN ON A GPU by this project: only the provider fall-back check and the options are checked,
with the CPU build of onnxruntime. The session is refused (the trial fails with the reason) when ONNX
Runtime puts it on another provider than the one asked for, which it otherwise does silently.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import onnxruntime as ort

from ...errors import UserError
from ...inputs.model import ModelFile, save_model
from ..base import Backend, Batch, BuildContext, Outputs
from ..common.cuda_rt import DeviceRuntime, load_runtime
from ..common.onnx_precision import ROUTE_OPTIONS, apply_precision
from ..common.onnx_precision import ROUTES as TRT_ROUTES
from ..common.paths import slug
from ..onnxruntime import OrtEngine, adapt_feed, file_precision, read_engine_dir, write_settings  # its public surface
from .providers import (
    CPU_EP,
    CUDA_EP,
    KNOWN,
    MIN_ORT,
    TRT_EP,
    make_gpu_session,
    ort_version,
    portable,
    provider_list,
    split_options,
)

log = logging.getLogger("tuner.backends.onnxruntime_gpu")

ROUTES = tuple(r for r in TRT_ROUTES if r != "bf16")  # the CUDA EP has few bf16 kernels; TensorRT's route covers bf16
INSTALL = 'pip uninstall onnxruntime && pip install onnxruntime-gpu "cuda-python" (an onnxruntime-gpu built for your CUDA)'

USAGE = """import json, onnxruntime as ort
opts = json.load(open("{dir}/session_options.json"))  # the provider and its options, as tuned
session = ort.InferenceSession("{dir}/model.onnx", providers=[tuple(p) for p in opts["providers"]])
assert session.get_providers()[0] == opts["providers"][0][0], "ONNX Runtime fell back to " + session.get_providers()[0]
outputs = session.run(None, inputs)  # inputs: {{input name: numpy array}}"""


class OrtGpuEngine(OrtEngine):
    """A session on the GPU. Inputs and outputs are bound to device memory once (IOBinding, which
    CUDA graphs require); each timed call is one synchronised run with no host copies."""

    def compute_precision(self) -> dict:
        """The model file's matrix ops: the GPU providers (TensorRT's above all) rewrite the graph their
        own way, and a CPU session's optimized graph would say nothing of it."""
        return file_precision(self.model_path)

    def _bound(self, batch: Batch):
        binding = self.session.io_binding()
        values = [ort.OrtValue.ortvalue_from_numpy(v, "cuda", 0) for v in adapt_feed(self.session, batch).values()]
        for name, value in zip(batch, values):
            binding.bind_ortvalue_input(name, value)
        for out in self.session.get_outputs():
            binding.bind_output(out.name, "cuda", 0)
        return binding, values  # the values must outlive the binding

    def run(self, batch: Batch) -> Outputs:
        binding, _ = self._bound(batch)
        self.session.run_with_iobinding(binding)
        names = [o.name for o in self.session.get_outputs()]
        values = binding.copy_outputs_to_cpu()
        return {n: v.astype(np.float32) if v.dtype == np.float16 else v for n, v in zip(names, values)}

    def timed_call(self, batch: Batch) -> Callable[[], None]:
        binding, values = self._bound(batch)
        session = self.session
        session.run_with_iobinding(binding)  # warm-up: TensorRT builds its engine on the first run

        def call() -> None:
            session.run_with_iobinding(binding)
            binding.synchronize_outputs()
            _ = values

        return call


class OnnxRuntimeGpuBackend(Backend):
    name = "onnxruntime-gpu"
    device = "cuda:0"
    routes = ROUTES
    quantizing_routes = ("int8", "fp16")
    float32: dict = {"cuda_use_tf32": False}  # the CUDA EP uses TF32 by default

    def __init__(self) -> None:
        available = ort.get_available_providers()
        if ort_version() < MIN_ORT:
            raise UserError(f"backend onnxruntime-gpu: onnxruntime {ort.__version__} is too old "
                            f"(needs {MIN_ORT[0]}.{MIN_ORT[1]}+); {INSTALL}")
        if TRT_EP not in available and CUDA_EP not in available:
            raise UserError(f"backend onnxruntime-gpu: this onnxruntime ({ort.__version__}) has no GPU provider "
                            f"(available: {', '.join(available)}); {INSTALL}")
        try:
            self.cuda: DeviceRuntime = load_runtime(int(self.device.partition(":")[2] or 0))
        except UserError as exc:
            raise UserError(f"backend onnxruntime-gpu: {exc}") from None

    def versions(self) -> dict[str, str]:
        return {self.name: ort.__version__, **self.cuda.versions()}

    def device_info(self) -> dict:
        return self.cuda.device_info() | {"providers": [p for p in ort.get_available_providers() if p != CPU_EP]}

    def knows(self, parameter: str) -> bool:
        return parameter in KNOWN or parameter in ROUTE_OPTIONS

    def build(self, model: ModelFile, config: dict, ctx: BuildContext) -> OrtGpuEngine:
        settings, dropped = split_options(config, ort_version())
        for line in dropped:  # an option this onnxruntime lacks is never sent
            log.warning(line)
        route = settings.get("precision", "fp32")
        ctx.on_phase("calibration" if route == "int8" else f"rewrite ({route})")
        graph = apply_precision(model.proto, settings, ctx.calib, self._calib_cache(ctx, settings))
        model_path = os.path.join(ctx.workdir, "model.onnx")
        save_model(graph, model_path)
        ctx.on_phase("session creation (TensorRT builds here)")
        providers = provider_list(settings, self._cache_dir(model, ctx), ctx.shapes)
        session = make_gpu_session(model_path, providers)
        saved = {"providers": portable(providers), "config": settings, "notes": dropped}
        write_settings(ctx.workdir, saved)
        return OrtGpuEngine(session, model_path, saved)

    def load(self, engine_dir: str) -> OrtGpuEngine:
        model_path, saved = read_engine_dir(engine_dir, self.name)
        return OrtGpuEngine(make_gpu_session(model_path, saved["providers"]), model_path, saved)

    def usage(self, engine_dir: str) -> str:
        return USAGE.format(dir=engine_dir)

    # ------------------------------------------------------------------ helpers

    def _cache_dir(self, model: ModelFile, ctx: BuildContext) -> str:
        """The TensorRT EP's timing cache: one per study, onnxruntime version and GPU model."""
        gpu = str(self.cuda.device_info().get("name", "gpu"))
        scope = ctx.study or f"model-{model.hash}"
        return os.path.join(ctx.cache_dir, "onnxruntime-gpu", slug(scope), f"{slug(ort.__version__)}-{slug(gpu)}")

    @staticmethod
    def _calib_cache(ctx: BuildContext, settings: dict[str, Any]) -> str | None:
        if settings.get("precision") != "int8" or not ctx.calib_key:
            return None
        method, ops = settings.get("int8_calibration", "MinMax"), settings.get("int8_op_types", "weighted")
        return os.path.join(ctx.cache_dir, f"calib-{ctx.calib_key}-{method}-trt-{ops}.json")

