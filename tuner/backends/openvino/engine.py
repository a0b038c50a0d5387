"""An OpenVINO engine: a compiled model with one infer request; saved as export_model() bytes plus the
properties it was compiled with, and imported back with them."""
from __future__ import annotations

import json
import os

import openvino as ov

from ..base import Batch
from .profile import engine_node_times
from .properties import DEVICE
from .runner import BLOB_FILE, CONFIG_FILE, OpenVinoRunner, read_saved

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


class OpenVinoEngine(OpenVinoRunner):
    """A built engine: what its timing runs (OpenVinoRunner), and saving, profiling and its precision as compiled."""

    def node_times(self, batch: Batch, workdir: str, runs: int, max_seconds: float) -> list[dict]:
        """Its runtime nodes' median times, PERF_COUNT on (tuner.execute.profiling: `tuner profile`)."""
        return engine_node_times(self, batch, runs, max_seconds)

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


def write_config(out_dir: str, properties: dict[str, str], output_names: list[str]) -> None:
    from importlib.metadata import version

    with open(os.path.join(out_dir, CONFIG_FILE), "w") as f:
        json.dump({"device": DEVICE, "properties": properties, "outputs": output_names,
                   "openvino": version("openvino")}, f, indent=2, sort_keys=True)


def load_engine(core: ov.Core, engine_dir: str) -> OpenVinoEngine:
    """Import a saved engine with the properties it was compiled with."""
    return OpenVinoEngine(*read_saved(core, engine_dir))
