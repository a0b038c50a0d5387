"""An OpenVINO engine: a compiled model with one infer request; saved as export_model() bytes plus the
properties it was compiled with, and imported back with them."""
from __future__ import annotations

import json
import os
from collections.abc import Callable

import numpy as np
import openvino as ov

from ..base import Batch, Outputs
from .profile import engine_node_times
from .properties import DEVICE

BLOB_FILE = "engine.blob"
CONFIG_FILE = "ov_config.json"
_FLOAT_OUTPUTS = (np.float16, np.float64)

USAGE = """import json, openvino as ov
saved = json.load(open("{dir}/ov_config.json"))  # the compile properties: import_model needs them back
core = ov.Core()
with open("{dir}/engine.blob", "rb") as f:
    compiled = core.import_model(f.read(), saved["device"], saved["properties"])
result = compiled.create_infer_request().infer(inputs)  # inputs: {{input name: numpy array}}
outputs = [result[compiled.output(name)] for name in saved["outputs"]]"""


# The runtime model's matrix layers (layerType in its rt_info): what a keep-in-float list is about.
_MATRIX_LAYERS = frozenset({"FullyConnected", "MatMul", "Convolution", "GroupConvolution", "Deconvolution"})
# OpenVINO element type names -> what a quantized layer's runtimePrecision means (a weight-compressed
# FullyConnected reports its weights' type: u8, i4).
_INTEGER = {"i8": "int8", "u8": "int8", "i4": "int4", "u4": "int4"}


def _port_index(ports, name: str) -> int:
    """The index of the port that carries tensor name `name` (a port can carry several)."""
    for i, port in enumerate(ports):
        if name in port.get_names():
            return i
    raise KeyError(f"the compiled model has no port named {name!r}")


class OpenVinoEngine:
    """A compiled model, its infer request and the properties it was compiled with."""

    def __init__(self, compiled: ov.CompiledModel, properties: dict[str, str], output_names: list[str]):
        self.compiled, self.properties = compiled, properties
        self._request = compiled.create_infer_request()
        self._staged: dict[int, np.ndarray] = {}  # input index -> the private array timed_call set
        # Name outputs by the ONNX graph's output names: after reshape + save_model the demo's `y`
        # port is {'y', 'final_ln_out'} and get_any_name() returns the latter.
        self.output_names = list(output_names)
        self._outputs = [_port_index(compiled.outputs, n) for n in output_names]

    def _feed(self, batch: Batch) -> dict[int, np.ndarray]:
        """The batch as contiguous arrays of the engine's input types, by input index."""
        out = {}
        for name, value in batch.items():
            index = _port_index(self.compiled.inputs, name)
            out[index] = np.ascontiguousarray(value, dtype=self.compiled.inputs[index].get_element_type().to_dtype())
        return out

    def run(self, batch: Batch) -> Outputs:
        # share_inputs=True: the request reads the arrays in place. The default copies the batch INTO
        # the request's current input tensors, which after timed_call are the staged private arrays.
        result = self._request.infer(self._feed(batch), share_inputs=True)
        out = {}
        for name, index in zip(self.output_names, self._outputs):
            value = np.array(result[index])  # a copy: the request's buffers are reused by the next run
            out[name] = value.astype(np.float32) if value.dtype in _FLOAT_OUTPUTS else value
        self._restage()
        return out

    def node_times(self, batch: Batch, workdir: str, runs: int, max_seconds: float) -> list[dict]:
        """Its runtime nodes' median times, PERF_COUNT on (tuner.execute.profiling: `tuner profile`)."""
        return engine_node_times(self, batch, runs, max_seconds)

    def timed_call(self, batch: Batch) -> Callable[[], None]:
        """Inputs staged once as tensors over private copies; each call is one synchronous inference
        without Python-side input handling or output copies (start_async + wait: measured equal to infer())."""
        self._staged = {i: v.copy() for i, v in self._feed(batch).items()}
        self._restage()
        request = self._request

        def call() -> None:
            request.start_async()
            request.wait()

        return call

    def _restage(self) -> None:
        for index, array in self._staged.items():
            self._request.set_input_tensor(index, ov.Tensor(array, shared_memory=True))

    def save(self, out_dir: str) -> str:
        """engine.blob (export_model) + ov_config.json. The blob does not carry the run-time properties:
        imported without them, a 1-thread engine came back with every core and another precision."""
        os.makedirs(out_dir, exist_ok=True)
        blob = self.compiled.export_model()  # io.BytesIO in openvino 2026 (bytes in older releases)
        path = os.path.join(out_dir, BLOB_FILE)
        with open(path, "wb") as f:
            f.write(blob.getvalue() if hasattr(blob, "getvalue") else blob)
        write_config(out_dir, self.properties, self.output_names)
        return path

    def compute_precision(self) -> dict:
        """The precision as compiled (see tuner.backends.base.Engine): INFERENCE_PRECISION_HINT asked back
        from the compiled model (bf16 on a CPU with BF16 when no hint was given), and each matrix layer
        of the runtime model by its runtimePrecision (i8/u8/i4/u4: quantized)."""
        hint = self.compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
        quantized, floats, kinds = 0, 0, set()
        for op in self.compiled.get_runtime_model().get_ordered_ops():
            info = op.get_rt_info()
            if "layerType" not in info or info["layerType"].astype(str) not in _MATRIX_LAYERS:
                continue
            runs = info["runtimePrecision"].astype(str) if "runtimePrecision" in info else ""
            if runs in _INTEGER:
                quantized += 1
                kinds.add(_INTEGER[runs])
            else:
                floats += 1
        return {"inference": hint, "source": f"OpenVINO INFERENCE_PRECISION_HINT {hint}",
                "quantized_nodes": quantized, "float_nodes": floats, "quantized": sorted(kinds)}

    def close(self) -> None:
        self._request = None
        self.compiled = None
        self._staged = {}


def write_config(out_dir: str, properties: dict[str, str], output_names: list[str]) -> None:
    from importlib.metadata import version

    with open(os.path.join(out_dir, CONFIG_FILE), "w") as f:
        json.dump({"device": DEVICE, "properties": properties, "outputs": output_names,
                   "openvino": version("openvino")}, f, indent=2, sort_keys=True)


def load_engine(core: ov.Core, engine_dir: str) -> OpenVinoEngine:
    """Import a saved engine with the properties it was compiled with."""
    blob, config = os.path.join(engine_dir, BLOB_FILE), os.path.join(engine_dir, CONFIG_FILE)
    if not (os.path.isfile(blob) and os.path.isfile(config)):
        raise ValueError(f"{engine_dir}: not an openvino engine ({BLOB_FILE} and {CONFIG_FILE} expected)")
    with open(config) as f:
        saved = json.load(f)
    with open(blob, "rb") as f:
        compiled = core.import_model(f.read(), saved["device"], saved["properties"])
    return OpenVinoEngine(compiled, saved["properties"], saved["outputs"])
