"""An OpenVINO engine as its timing needs it: the compiled model of a saved engine (export_model() bytes,
imported with the properties it was compiled with) and one infer request over a staged batch. Imports
OpenVINO and nothing of the builders (no onnx, no NNCF), so a process that only times a saved engine starts
in a fraction of a second (tuner.execute.engine_process)."""
from __future__ import annotations

import json
import os
from collections.abc import Callable

import numpy as np
import openvino as ov

from ..base import Batch, Outputs

BLOB_FILE = "engine.blob"
CONFIG_FILE = "ov_config.json"
_FLOAT_OUTPUTS = (np.float16, np.float64)


def _port_index(ports, name: str) -> int:
    """The index of the port that carries tensor name `name` (a port can carry several)."""
    for i, port in enumerate(ports):
        if name in port.get_names():
            return i
    raise KeyError(f"the compiled model has no port named {name!r}")


class OpenVinoRunner:
    """A compiled model, its infer request and the properties it was compiled with."""

    def __init__(self, compiled: ov.CompiledModel, properties: dict[str, str], output_names: list[str]):
        self.compiled, self.properties = compiled, properties
        self._request = compiled.create_infer_request()
        self._staged: dict[int, np.ndarray] = {}  # input index -> the private array timed_call set
        self._queue: ov.AsyncInferQueue | None = None  # concurrent_call's requests
        self._queue_inputs: list[dict[int, np.ndarray]] = []  # and the arrays their input tensors share
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

    def concurrent_call(self, batch: Batch, in_flight: int) -> Callable[[], None]:
        """`in_flight` infer requests of the compiled model (an AsyncInferQueue), each with the batch staged once, all
        started at once and waited for: as many run at a time as the compiled model's streams allow (one with the
        latency hint, several with the throughput hint)."""
        feed = self._feed(batch)
        self._queue = ov.AsyncInferQueue(self.compiled, in_flight)
        # each request's own copies, kept alive here: a shared-memory tensor does not hold its array
        self._queue_inputs = [{i: v.copy() for i, v in feed.items()} for _ in range(in_flight)]
        for request, arrays in zip(self._queue, self._queue_inputs):
            for index, array in arrays.items():
                request.set_input_tensor(index, ov.Tensor(array, shared_memory=True))
        queue = self._queue

        def call() -> None:
            for _ in range(in_flight):
                queue.start_async()
            queue.wait_all()

        return call

    def _restage(self) -> None:
        for index, array in self._staged.items():
            self._request.set_input_tensor(index, ov.Tensor(array, shared_memory=True))

    def close(self) -> None:
        self._queue, self._queue_inputs = None, []
        self._request = None
        self.compiled = None
        self._staged = {}


def read_saved(core: ov.Core, engine_dir: str) -> tuple[ov.CompiledModel, dict[str, str], list[str]]:
    """(the compiled model, its properties, its output names) of a saved engine, imported with the properties
    it was compiled with: imported without them, a 1-thread engine came back with every core and another precision."""
    blob, config = os.path.join(engine_dir, BLOB_FILE), os.path.join(engine_dir, CONFIG_FILE)
    if not (os.path.isfile(blob) and os.path.isfile(config)):
        raise ValueError(f"{engine_dir}: not an openvino engine ({BLOB_FILE} and {CONFIG_FILE} expected)")
    with open(config) as f:
        saved = json.load(f)
    with open(blob, "rb") as f:
        compiled = core.import_model(f.read(), saved["device"], saved["properties"])
    return compiled, saved["properties"], saved["outputs"]


def load(engine_dir: str) -> OpenVinoRunner:
    """The engine Engine.save wrote into engine_dir, as its timing runs it."""
    return OpenVinoRunner(*read_saved(ov.Core(), engine_dir))
