"""CUDA for the GPU backends: device memory, one stream, events, graphs, and what the GPU and driver are.

Why cuda-python (`cuda.bindings.runtime`): it is the CUDA runtime API itself, a small wheel, the one
NVIDIA's TensorRT Python samples use (samples/python/common_runtime.py), and it sees the same driver as
TensorRT. PyTorch is used instead only when cuda-python is absent and torch with CUDA is importable (it
brings a CUDA runtime of its own, gigabytes, so it is never required). Both stay optional: the
backend says what to install when neither imports (and the same when no GPU answers).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ...errors import UserError

CUDA_HINT = 'pip install "cuda-python" (or a CUDA build of torch)'


class DeviceRuntime(Protocol):
    """What an engine needs from CUDA; handles are plain ints (device pointers, stream, events, graphs)."""

    name: str

    def malloc(self, nbytes: int) -> int: ...
    def free(self, ptr: int) -> None: ...
    def stream(self) -> int: ...
    def to_device(self, ptr: int, host: np.ndarray, stream: int) -> None: ...
    def to_host(self, host: np.ndarray, ptr: int, stream: int) -> None: ...
    def synchronize(self, stream: int) -> None: ...
    def event_pair(self) -> EventPair: ...
    def capture(self, stream: int, enqueue: Callable[[], None]) -> Graph: ...
    def device_info(self) -> dict[str, Any]: ...
    def versions(self) -> dict[str, str]: ...


class EventPair(Protocol):
    def start(self, stream: int) -> None: ...
    def stop(self, stream: int) -> None: ...
    def elapsed_ms(self) -> float: ...  # waits for the stop event


class Graph(Protocol):
    def launch(self, stream: int) -> None: ...
    def destroy(self) -> None: ...


def cuda_version_text(v: int) -> str:
    """CUDA's integer versions: 12080 -> '12.8', 13000 -> '13.0'."""
    return f"{v // 1000}.{(v % 1000) // 10}"


# ------------------------------------------------------------------------------------------ cuda-python


def _import_cudart():
    try:
        from cuda.bindings import runtime as cudart  # cuda-python 12.6+ / cuda-bindings
    except ImportError:
        from cuda import cudart  # type: ignore[no-redef]  # older cuda-python
    return cudart


class CudartRuntime:
    name = "cuda-python"

    def __init__(self, device: int = 0):
        self.rt = _import_cudart()
        self.device = device
        self._call("cudaSetDevice", device)

    def _call(self, fn: str, *args) -> Any:
        """Call a cudart function; raise on an error code; return its value(s) after the code."""
        result = getattr(self.rt, fn)(*args)
        err, rest = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
        if err != self.rt.cudaError_t.cudaSuccess:
            name = self.rt.cudaGetErrorName(err)[1]
            raise RuntimeError(f"{fn} failed: {name.decode() if isinstance(name, bytes) else name}")
        return rest[0] if len(rest) == 1 else rest

    def malloc(self, nbytes: int) -> int:
        return int(self._call("cudaMalloc", max(nbytes, 1)))

    def free(self, ptr: int) -> None:
        self._call("cudaFree", ptr)

    def stream(self) -> int:
        return int(self._call("cudaStreamCreateWithFlags", self.rt.cudaStreamNonBlocking))

    def to_device(self, ptr: int, host: np.ndarray, stream: int) -> None:
        self._call("cudaMemcpyAsync", ptr, host.ctypes.data, host.nbytes,
                   self.rt.cudaMemcpyKind.cudaMemcpyHostToDevice, stream)

    def to_host(self, host: np.ndarray, ptr: int, stream: int) -> None:
        self._call("cudaMemcpyAsync", host.ctypes.data, ptr, host.nbytes,
                   self.rt.cudaMemcpyKind.cudaMemcpyDeviceToHost, stream)

    def synchronize(self, stream: int) -> None:
        self._call("cudaStreamSynchronize", stream)

    def event_pair(self) -> _CudartEvents:
        return _CudartEvents(self)

    def capture(self, stream: int, enqueue: Callable[[], None]) -> _CudartGraph:
        """Record one enqueue into a CUDA graph (thread-local capture mode, as trtexec does)."""
        self._call("cudaStreamBeginCapture", stream, self.rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal)
        try:
            enqueue()
        finally:
            graph = self._call("cudaStreamEndCapture", stream)
        return _CudartGraph(self, graph, self._call("cudaGraphInstantiate", graph, 0))

    def device_info(self) -> dict[str, Any]:
        p = self._call("cudaGetDeviceProperties", self.device)
        name = p.name.decode(errors="replace") if isinstance(p.name, bytes) else str(p.name)
        return {"device": f"cuda:{self.device}", "name": name.rstrip("\x00"),
                "compute_capability": f"{p.major}.{p.minor}", "memory_bytes": int(p.totalGlobalMem),
                "multiprocessors": int(p.multiProcessorCount)}

    def versions(self) -> dict[str, str]:
        return {"cuda_driver": cuda_version_text(int(self._call("cudaDriverGetVersion"))),
                "cuda_runtime": cuda_version_text(int(self._call("cudaRuntimeGetVersion"))),
                "gpu": self.device_info()["name"]}


@dataclass
class _CudartEvents:
    cu: CudartRuntime

    def __post_init__(self):
        self.begin = self.cu._call("cudaEventCreate")
        self.end = self.cu._call("cudaEventCreate")

    def start(self, stream: int) -> None:
        self.cu._call("cudaEventRecord", self.begin, stream)

    def stop(self, stream: int) -> None:
        self.cu._call("cudaEventRecord", self.end, stream)

    def elapsed_ms(self) -> float:
        self.cu._call("cudaEventSynchronize", self.end)
        return float(self.cu._call("cudaEventElapsedTime", self.begin, self.end))


@dataclass
class _CudartGraph:
    cu: CudartRuntime
    graph: Any
    exec_: Any

    def launch(self, stream: int) -> None:
        self.cu._call("cudaGraphLaunch", self.exec_, stream)

    def destroy(self) -> None:
        self.cu._call("cudaGraphExecDestroy", self.exec_)
        self.cu._call("cudaGraphDestroy", self.graph)


# ------------------------------------------------------------------------------------------------ torch


class TorchRuntime:
    """The same through PyTorch: buffers are uint8 tensors kept alive here, keyed by data pointer;
    copies go through torch tensors on the engine's stream."""

    name = "torch"

    def __init__(self, device: int = 0):
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
        self.torch, self.device = torch, device
        self._buffers: dict[int, Any] = {}
        self._streams: dict[int, Any] = {}

    def malloc(self, nbytes: int) -> int:
        t = self.torch.empty(max(nbytes, 1), dtype=self.torch.uint8, device=f"cuda:{self.device}")
        self._buffers[t.data_ptr()] = t
        return t.data_ptr()

    def free(self, ptr: int) -> None:
        self._buffers.pop(ptr, None)

    def stream(self) -> int:
        s = self.torch.cuda.Stream(device=self.device)
        self._streams[s.cuda_stream] = s
        return s.cuda_stream

    def to_device(self, ptr: int, host: np.ndarray, stream: int) -> None:
        dst = self._buffers[ptr]
        with self.torch.cuda.stream(self._streams[stream]):
            dst[: host.nbytes].copy_(self.torch.from_numpy(host.view(np.uint8).reshape(-1)), non_blocking=False)

    def to_host(self, host: np.ndarray, ptr: int, stream: int) -> None:
        src = self._buffers[ptr]
        with self.torch.cuda.stream(self._streams[stream]):
            host.view(np.uint8).reshape(-1)[:] = src[: host.nbytes].cpu().numpy()

    def synchronize(self, stream: int) -> None:
        self._streams[stream].synchronize()

    def event_pair(self) -> _TorchEvents:
        return _TorchEvents(self)

    def capture(self, stream: int, enqueue: Callable[[], None]) -> _TorchGraph:
        g = self.torch.cuda.CUDAGraph()
        with self.torch.cuda.graph(g, stream=self._streams[stream]):
            enqueue()
        return _TorchGraph(self, g)

    def device_info(self) -> dict[str, Any]:
        p = self.torch.cuda.get_device_properties(self.device)
        return {"device": f"cuda:{self.device}", "name": p.name, "compute_capability": f"{p.major}.{p.minor}",
                "memory_bytes": int(p.total_memory), "multiprocessors": int(p.multi_processor_count)}

    def versions(self) -> dict[str, str]:
        return {"cuda_runtime": str(self.torch.version.cuda), "gpu": self.device_info()["name"],
                "cuda_driver": _driver_version_via_nvml()}


@dataclass
class _TorchEvents:
    tr: TorchRuntime

    def __post_init__(self):
        self.begin = self.tr.torch.cuda.Event(enable_timing=True)
        self.end = self.tr.torch.cuda.Event(enable_timing=True)

    def start(self, stream: int) -> None:
        self.begin.record(self.tr._streams[stream])

    def stop(self, stream: int) -> None:
        self.end.record(self.tr._streams[stream])

    def elapsed_ms(self) -> float:
        self.end.synchronize()
        return float(self.begin.elapsed_time(self.end))


@dataclass
class _TorchGraph:
    tr: TorchRuntime
    g: Any

    def launch(self, stream: int) -> None:
        with self.tr.torch.cuda.stream(self.tr._streams[stream]):
            self.g.replay()

    def destroy(self) -> None:
        self.g.reset()


def _driver_version_via_nvml() -> str:
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        return cuda_version_text(int(pynvml.nvmlSystemGetCudaDriverVersion()))
    except Exception:  # noqa: BLE001  optional
        return "unknown"


# ------------------------------------------------------------------------------------------------ choice


def load_runtime(device: int = 0, prefer: str = "cuda-python") -> DeviceRuntime:
    """cuda-python if it imports, else torch with CUDA; a UserError with one line when neither works."""
    order = [CudartRuntime, TorchRuntime] if prefer == "cuda-python" else [TorchRuntime, CudartRuntime]
    reasons = []
    for cls in order:
        try:
            return cls(device)
        except (ImportError, RuntimeError, OSError) as exc:
            reasons.append(f"{cls.name}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    raise UserError(f"no usable CUDA device or runtime ({'; '.join(reasons)}); a GPU backend needs an NVIDIA GPU "
                    f"and {CUDA_HINT}")
