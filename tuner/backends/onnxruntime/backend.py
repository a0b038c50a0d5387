"""The ONNX Runtime CPU backend: precision routes as ONNX rewrites, session options as build settings,
engine = the rewritten model file + session_options.json."""
from __future__ import annotations

import functools
import os
import platform
import shutil
from typing import Any

import onnxruntime as ort

from ...inputs.model import ModelFile
from ..base import Backend, Batch, BuildContext
from .optimizers import is_optimizer, unknown_optimizer
from .precision import session_precision
from .profile import engine_node_times, node_time_shares
from .quantize import QUANTIZING_ROUTES, ROUTE_DEFAULTS, ROUTES, apply_precision, route_variants
from .runner import OrtRunner
from .session import (
    DISABLE_PREFIX,
    SESSION_KEYS,
    make_session,
    read_engine_dir,
    session_activations,
    session_settings,
    write_settings,
)


class OrtEngine(OrtRunner):
    """A built engine: what its timing runs (OrtRunner), and saving, profiling and its precision as run."""

    def save(self, out_dir: str) -> str:
        os.makedirs(out_dir, exist_ok=True)
        src_dir = os.path.dirname(os.path.abspath(self.model_path))
        if os.path.abspath(out_dir) != src_dir:
            for name in os.listdir(src_dir):  # the model and its external data, if any
                if name == os.path.basename(self.model_path) or name.startswith(os.path.basename(self.model_path) + "."):
                    shutil.copy2(os.path.join(src_dir, name), out_dir)
        write_settings(out_dir, self.settings)
        return os.path.join(out_dir, os.path.basename(self.model_path))

    def node_times(self, batch: Batch, workdir: str, runs: int, max_seconds: float) -> list[dict]:
        """Its runtime nodes' median kernel times (tuner.execute.profiling: `tuner profile`)."""
        return engine_node_times(self.model_path, self.settings, batch, workdir, runs, max_seconds)

    def compute_precision(self) -> dict:
        """The matrix ops of the graph this session runs, quantized or float (tuner.backends.base.Engine)."""
        return session_precision(self.model_path, self.settings)


USAGE = """import json, onnxruntime as ort
opts = json.load(open("{dir}/session_options.json"))
so = ort.SessionOptions()
so.graph_optimization_level = {{"disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC, "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}}[opts.get("graph_optimization_level", "all")]
if opts.get("execution_mode") == "parallel":
    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    so.inter_op_num_threads = opts.get("inter_op_num_threads", 0)
so.intra_op_num_threads = opts.get("intra_op_num_threads", 0)
so.add_session_config_entry("session.intra_op.allow_spinning", "1" if opts.get("intra_op_spinning", True) else "0")
session = ort.InferenceSession("{dir}/model.onnx", so, providers=["CPUExecutionProvider"],
                               disabled_optimizers=opts.get("disabled_optimizers") or None)
outputs = session.run(None, inputs)  # inputs: {{input name: numpy array}}"""


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"
    device = "cpu"
    profiles_nodes = True
    serves_concurrently = True
    routes = ROUTES
    quantizing_routes = QUANTIZING_ROUTES

    def reads_opset(self, opset: int) -> bool:
        return _reads_opset(opset)

    def versions(self) -> dict[str, str]:
        return {"onnxruntime": ort.__version__}

    def device_info(self) -> dict:
        return {"device": "cpu", "machine": platform.machine(), "providers": ort.get_available_providers()}

    def knows(self, parameter: str) -> bool:
        if parameter.startswith(DISABLE_PREFIX):
            return is_optimizer(parameter[len(DISABLE_PREFIX):])
        return parameter == "precision" or parameter in SESSION_KEYS or parameter in ROUTE_DEFAULTS

    def route_variants(self, route: str, attention: bool) -> list[dict]:
        return route_variants(route, attention)

    def why_unknown(self, parameter: str) -> str:
        if parameter.startswith(DISABLE_PREFIX):
            return unknown_optimizer(parameter[len(DISABLE_PREFIX):])
        return f"no session option or route option {parameter!r}"

    def build(self, model: ModelFile, config: dict, ctx: BuildContext) -> OrtEngine:
        route = config.get("precision", "fp32")
        ctx.on_phase("calibration" if route == "int8-static" else f"build ({route})")
        model_path = apply_precision(model.proto, config, ctx.workdir, ctx.calib, ctx.cache_dir, ctx.calib_key)
        settings = session_settings(config)
        ctx.on_phase("session creation")
        session = make_session(model_path, settings, ctx.side_by_side)
        write_settings(ctx.workdir, settings)
        src = os.path.join(ctx.workdir, "input.onnx")  # the quantizers' input copy
        if os.path.exists(src):
            os.remove(src)
        return OrtEngine(session, model_path, settings)

    def load(self, engine_dir: str) -> OrtEngine:
        model_path, settings = read_engine_dir(engine_dir, self.name)
        return OrtEngine(make_session(model_path, settings), model_path, settings)

    def usage(self, engine_dir: str) -> str:
        return USAGE.format(dir=engine_dir)

    def activations(self, model: ModelFile, config: dict, tensors: list[str], batches: list[Batch],
                    ctx: BuildContext) -> list[dict[str, Any]]:
        """The route's model (its tensor names are the ONNX graph's: the quantizers keep each node's output
        name), with `tensors` made graph outputs, run by a session with the config's settings."""
        return session_activations(apply_precision(model.proto, config, ctx.workdir, ctx.calib, ctx.cache_dir,
                                                   ctx.calib_key), session_settings(config), tensors, batches)

    def node_times(self, model: ModelFile, batches: list[Batch], workdir: str) -> dict[str, float]:
        return node_time_shares(model.path, batches, workdir)


@functools.cache
def _reads_opset(opset: int) -> bool:
    """A session of a one-node model (Relu) stamped with the opset: ONNX Runtime refuses, at load, an opset
    above the ONNX release it was built with (1.32: 28); under a millisecond."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "probe", [x], [y]),
                              opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001  any refusal of the probe is a refusal of the opset
        return False
    return True
