"""A built TensorRT engine, loaded: device buffers, one stream, CUDA-event timing, optional CUDA graph.

Inputs and outputs stay resident on the device. `timed_call` stages the inputs once; each call is one
enqueue (execute_async_v3, or a launch of the CUDA graph captured from it) between two CUDA events on
the engine's stream, waits for the end event and returns the events' time, which the tuner records
instead of the wall clock around the call (tuner.measure.latency).
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..common.bf16 import bf16_bits_to_float32, float32_to_bf16_bits
from ..common.cuda_rt import DeviceRuntime, Graph

PLAN_FILE = "engine.plan"
CONFIG_FILE = "tensorrt_config.json"


def np_dtype(trt_dtype_name: str) -> np.dtype:
    """numpy storage for a TensorRT DataType name ('FLOAT', 'HALF', 'BF16', ...); bf16 is held as uint16."""
    table = {"FLOAT": np.float32, "HALF": np.float16, "BF16": np.uint16, "INT8": np.int8, "INT32": np.int32,
             "INT64": np.int64, "BOOL": np.bool_, "UINT8": np.uint8}
    if trt_dtype_name not in table:
        raise TypeError(f"tensor type {trt_dtype_name} has no numpy form here")
    return np.dtype(table[trt_dtype_name])


def to_engine(a: np.ndarray, trt_dtype_name: str) -> np.ndarray:
    """A batch array in the engine's input type (float32 -> bf16 bit patterns for a BF16 input)."""
    if trt_dtype_name == "BF16":
        return float32_to_bf16_bits(np.asarray(a, dtype=np.float32))
    return np.ascontiguousarray(a, dtype=np_dtype(trt_dtype_name))


def to_float32(a: np.ndarray, trt_dtype_name: str) -> np.ndarray:
    """Float outputs as float32 (bf16 bit patterns widened), so every engine compares to one reference."""
    if trt_dtype_name == "BF16":
        return bf16_bits_to_float32(a)
    return a.astype(np.float32) if a.dtype.kind == "f" and a.dtype != np.float32 else a


@dataclass
class IOTensor:
    name: str
    is_input: bool
    dtype_name: str  # TensorRT DataType name
    shape: tuple[int, ...] = ()
    ptr: int = 0
    host: np.ndarray | None = None


class TrtEngine:
    def __init__(self, trt, plan: bytes, settings: dict[str, Any], cuda: DeviceRuntime, extra_files: dict[str, bytes]):
        self.trt, self.plan, self.settings, self.cuda = trt, plan, settings, cuda
        self.extra_files = extra_files  # written by save(): timing.cache, tactics.json
        self.runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        self.engine = self.runtime.deserialize_cuda_engine(plan)
        if self.engine is None:
            raise RuntimeError("TensorRT could not deserialise the plan it just built")
        self.context = self.engine.create_execution_context()
        self.stream = cuda.stream()
        self.tensors = self._io_tensors()
        self.graph: Graph | None = None

    def _io_tensors(self) -> list[IOTensor]:
        out = []
        for i in range(self.engine.num_io_tensors):
            name = self.engine.get_tensor_name(i)
            is_input = self.engine.get_tensor_mode(name) == self.trt.TensorIOMode.INPUT
            out.append(IOTensor(name, is_input, self.engine.get_tensor_dtype(name).name))
        return out

    def _stage(self, batch: dict[str, np.ndarray]) -> None:
        """Shapes, device buffers (reallocated only when a shape changes) and the input copies."""
        for t in (t for t in self.tensors if t.is_input):
            host = to_engine(batch[t.name], t.dtype_name)
            if tuple(host.shape) != t.shape:
                self.context.set_input_shape(t.name, host.shape)
                self._realloc(t, host.nbytes, tuple(host.shape))
            t.host = host
            self.cuda.to_device(t.ptr, host, self.stream)
        for t in (t for t in self.tensors if not t.is_input):
            shape = tuple(self.context.get_tensor_shape(t.name))
            if shape != t.shape or t.host is None:
                host = np.empty(shape, dtype=np_dtype(t.dtype_name))
                self._realloc(t, host.nbytes, shape)
                t.host = host
        for t in self.tensors:
            self.context.set_tensor_address(t.name, t.ptr)

    def _realloc(self, t: IOTensor, nbytes: int, shape: tuple[int, ...]) -> None:
        if t.ptr:
            self.cuda.free(t.ptr)
        t.ptr, t.shape = self.cuda.malloc(nbytes), shape
        self._drop_graph()  # a captured graph holds the old addresses

    def _enqueue(self) -> None:
        if not self.context.execute_async_v3(self.stream):
            raise RuntimeError("IExecutionContext.execute_async_v3 failed; see TensorRT's log above")

    def _launch(self) -> None:
        if self.graph is not None:
            self.graph.launch(self.stream)
        else:
            self._enqueue()

    def _prepare(self, batch: dict[str, np.ndarray]) -> None:
        self._stage(batch)
        if self.settings.get("cuda_graph") and self.graph is None:
            self._enqueue()  # one plain run first: TensorRT finishes lazy set-up outside the capture
            self.cuda.synchronize(self.stream)
            self.graph = self.cuda.capture(self.stream, self._enqueue)

    def run(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self._prepare(batch)
        self._launch()
        outs = [t for t in self.tensors if not t.is_input]
        for t in outs:
            self.cuda.to_host(t.host, t.ptr, self.stream)
        self.cuda.synchronize(self.stream)
        return {t.name: to_float32(t.host.copy(), t.dtype_name) for t in outs}

    def timed_call(self, batch: dict[str, np.ndarray], warmup: int = 3) -> Callable[[], float]:
        """Inputs staged once, a few warm-up runs; then each call = CUDA events around one enqueue on the
        engine's stream, synchronised; it returns the events' time in ms, which the tuner records."""
        self._prepare(batch)
        for _ in range(warmup):
            self._launch()
        self.cuda.synchronize(self.stream)
        events = self.cuda.event_pair()

        def call() -> float:
            events.start(self.stream)
            self._launch()
            events.stop(self.stream)
            return events.elapsed_ms()  # waits for the stop event

        return call

    def save(self, out_dir: str) -> str:
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, PLAN_FILE)
        with open(path, "wb") as f:
            f.write(self.plan)
        for name, data in self.extra_files.items():
            with open(os.path.join(out_dir, name), "wb") as f:
                f.write(data)
        with open(os.path.join(out_dir, CONFIG_FILE), "w") as f:
            json.dump(self.settings, f, indent=2, sort_keys=True)
        return path

    def _drop_graph(self) -> None:
        if self.graph is not None:
            self.graph.destroy()
            self.graph = None

    def close(self) -> None:
        self._drop_graph()
        for t in self.tensors:
            if t.ptr:
                self.cuda.free(t.ptr)
                t.ptr = 0
        self.context = self.engine = self.runtime = None
