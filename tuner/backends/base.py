"""The backend seam: what every inference compiler gives the tuner, and the registry that finds one by name.

A backend turns (model, config) into an Engine; the tuner only ever runs, times, saves and closes
engines. Nothing above this seam knows how an engine is built or which library builds it.
"""
from __future__ import annotations

import abc
import functools
import importlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from ..errors import UserError

if TYPE_CHECKING:  # names for annotations only: a process that only times an engine imports no onnx
    from ..inputs.model import ModelFile
    from ..inputs.space import Param

Batch = dict[str, np.ndarray]
Outputs = dict[str, np.ndarray]


def _no_phase(name: str) -> None:
    pass


@dataclass
class BuildContext:
    """What a build may use besides the model and the config."""

    workdir: str  # the engine's artifacts go here (created by the caller)
    shapes: dict[str, tuple[int, ...]]  # the study's concrete input shapes (a workload's first set)
    calib: list[Batch] = field(default_factory=list)  # calibration batches for static quantization
    calib_key: str = ""  # names cached calibration results (model hash + data hash)
    cache_dir: str = ".tuner-cache"  # calibration ranges, compile caches
    on_phase: Callable[[str], None] = _no_phase  # "calibration", "compile", ...: where a crash happened
    # The engine will be timed alternately with other live engines in one process (selection):
    # a backend whose idle engines keep threads spinning must stop them after each run.
    side_by_side: bool = False
    # The study whose trials share compile caches (TensorRT's timing cache); "" outside a study.
    study: str = ""
    # Every set of shapes the engine must serve, where the workload has several (tuner.inputs.workload); []: `shapes`.
    workload: list[dict[str, tuple[int, ...]]] = field(default_factory=list)


@runtime_checkable
class Engine(Protocol):
    """A built engine, loaded and ready to run."""

    def run(self, batch: Batch) -> Outputs:
        """One inference; float outputs come back as float32, so every engine compares to one reference."""

    def timed_call(self, batch: Batch) -> Callable[[], float | None]:
        """Stage the inputs once; each call of the result is one synchronised inference. A call that
        returns a float gives its own time in ms (a GPU's CUDA events); None: the wall clock times it."""

    def save(self, out_dir: str) -> str:
        """Write a loadable engine (artifact + the config it needs) into out_dir; return its main file. out_dir may
        be the folder it was built in (BuildContext.workdir): a trial saves its engine there."""

    def close(self) -> None:
        """Free the engine's memory and threads."""



# An engine's optional abilities, each a Protocol of its own: a third party's engine that has the method has the
# ability, with nothing to inherit, and the tuner asks isinstance (runtime_checkable), never getattr.
@runtime_checkable
class ReportsPrecision(Protocol):
    def compute_precision(self) -> dict:
        """The precision the engine computes in, as its runtime reports it (engine_precision below):
          {"inference": "bf16",      # what its float parts run in: f32, bf16, f16 (the runtime's own answer)
           "source": "OpenVINO INFERENCE_PRECISION_HINT bf16",  # where that answer came from
           "quantized_nodes": 23,    # matrix ops (MatMul, Conv, Gemm, ...) that run quantized
           "float_nodes": 1,         # matrix ops that run in float
           "quantized": ["int8"]}    # the integer types of the quantized ones"""


@runtime_checkable
class ProfilesNodes(Protocol):
    def node_times(self, batch: Batch, workdir: str, runs: int, max_seconds: float) -> list[dict]:
        """Each runtime node from the runtime's own profiler, median of `runs` runs (at most max_seconds):
        [{"name", "op" (as it ran), "ms", "originals" (the model nodes it holds, where the runtime says)}].
        `tuner profile` (tuner.execute.profiling) asks it of a backend that declares profiles_nodes."""


@runtime_checkable
class ServesConcurrently(Protocol):
    def concurrent_call(self, batch: Batch, in_flight: int) -> Callable[[], float | None]:
        """timed_call's counterpart for throughput (--throughput): each call of the result puts `in_flight` requests
        on the batch in flight at once, with the runtime's own parallelism (OpenVINO's infer requests and streams,
        ONNX Runtime's concurrent runs of one session), and returns when all are done."""


def engine_precision(engine: object) -> dict:
    """What `engine` computes in (ReportsPrecision): {} for an engine that cannot say, {"error": ...} where
    asking failed: knowing the precision never costs a measurement."""
    if not isinstance(engine, ReportsPrecision):
        return {}
    try:
        return dict(engine.compute_precision() or {})
    except Exception as exc:  # noqa: BLE001  a runtime that cannot answer leaves the trial as it was
        return {"error": f"{type(exc).__name__}: {exc}"}


class Backend(abc.ABC):
    """An inference compiler as the tuner sees it. A backend subclasses this: the abstract methods are
    what it must give; the hooks below them have defaults that mean "this backend has none"."""

    name: str  # the space file's `backend:`
    device: str  # the key of the timing lock: "cpu", "cuda:0"
    routes: tuple[str, ...]  # the precision routes it realises (the `precision` parameter's choices)
    quantizing_routes: tuple[str, ...] = ()  # routes that take a per-layer keep-in-float list
    # What `precision: fp32` needs besides to compute in float32 throughout: a config that leaves a
    # precision hint out gets the library's own default, which may be lower (OpenVINO: bf16 on a CPU
    # with BF16; TensorRT and CUDA: TF32).
    float32: dict = {}
    # Its engines are ProfilesNodes: `tuner profile` refuses a backend without it before building anything.
    profiles_nodes: bool = False
    # Its timing runner's engines are ServesConcurrently: a study with --throughput refuses a backend without it.
    serves_concurrently: bool = False
    # Settings (config keys) an expert gives a quantized engine where the adapted space offers them
    # (OpenVINO: bf16 for the float parts on a CPU with BF16, static shapes); the route variants, the
    # ranking and its enqueued greedy trial use them (tuner.analysis.variants).
    quantized_settings: dict = {}

    @abc.abstractmethod
    def versions(self) -> dict[str, str]:
        """Library versions: part of the machine fingerprint and of every build key."""

    @abc.abstractmethod
    def device_info(self) -> dict:
        """What the device is (model, capabilities): timings from different devices never mix."""

    @abc.abstractmethod
    def knows(self, parameter: str) -> bool:
        """Whether a space parameter name is one of this backend's build settings or route options."""

    @abc.abstractmethod
    def build(self, model: ModelFile, config: dict, ctx: BuildContext) -> Engine:
        """Build the engine of `config` (a normalized space config) into ctx.workdir and load it."""

    @abc.abstractmethod
    def load(self, engine_dir: str) -> Engine:
        """Load an engine that Engine.save wrote, with the settings it was built with."""

    @abc.abstractmethod
    def usage(self, engine_dir: str) -> str:
        """A few lines of Python that load the saved engine with the backend's own library and run it on
        `inputs` (a dict of input name -> array), leaving the result in `outputs` (a list, in output order)."""

    # ---- hooks: a backend overrides those it has

    def node_times(self, model: ModelFile, batches: list[Batch], workdir: str) -> dict[str, float]:
        """{node name: share of the run time} for the sensitivity profile; {}: no profiler."""
        return {}

    # B027: an optional hook, empty by default on purpose (a backend without it has nothing to keep)
    def measured(self, model: ModelFile, ctx: BuildContext, median_ms: float, feasible: bool) -> None:  # noqa: B027
        """Told after the engine in ctx.workdir was timed (tuner.execute.evaluate.measure); TensorRT keeps the
        fastest feasible engine's tactics for later trials."""

    def activations(self, model: ModelFile, config: dict, tensors: list[str], batches: list[Batch],
                    ctx: BuildContext) -> list[dict[str, np.ndarray]] | None:
        """The values of `tensors` (names of tensors of the model's ONNX graph) as the engine of `config` computes
        them on each batch: the one-pass sensitivity compares a float run's with an all-quantized one's
        (tuner.analysis.sensitivity). A tensor the built graph no longer holds is left out. None: this backend
        cannot say, and layers are ranked by builds instead."""
        return None

    def fixes_shapes(self, config: dict) -> str | None:
        """Why an engine of this config runs only at the input shapes it was built for (one phrase naming the
        option), or None where it takes any shape the model does. Export says so beside the shapes."""
        return None

    def reads_opset(self, opset: int) -> bool:
        """Whether this runtime reads a model of this ai.onnx opset (a one-node model of it, tried). A backend
        that cannot say is let try: True."""
        return True

    def why_unknown(self, parameter: str) -> str:
        """What is wrong with a parameter knows() refused (one phrase; "" when there is nothing to add)."""
        return ""

    def adapt(self, param: Param) -> tuple[Param | None, str]:
        """The space parameter (looked at by its config key) as this device can run it: choices that would
        build the same engine as another (a bf16 hint on a CPU without BF16) dropped, None for a parameter
        that changes nothing here, the default set to the library's own default on this device. The reason
        says in one sentence what was dropped and why ("" when nothing was); it is shown to the user once."""
        return param, ""

    def throughput_params(self) -> list[Param]:
        """Parameters a study that measures throughput (--throughput) adds to the space for this backend, with the
        library's own default first (OpenVINO's performance hint). None by default."""
        return []

    def route_variants(self, route: str, attention: bool) -> list[dict]:
        """The accuracy-relevant option sets (config keys; {} = the space's defaults) of a quantizing
        route, each built all-quantized before layers are ranked (tuner.analysis.variants); attention: the model
        may hold attention (a Softmax and a MatMul: tuner.inputs.attention.may_have_attention), so a
        transformer's options are worth their builds. By default one: the space's defaults."""
        return [{}]


# The backends this package brings: name -> (module, class, the pip extra or package that brings its library).
_BUILT_IN: dict[str, tuple[str, str, str]] = {
    "onnxruntime": ("tuner.backends.onnxruntime.backend", "OnnxRuntimeBackend", "onnxruntime"),
    "onnxruntime-gpu": ("tuner.backends.onnxruntime_gpu", "OnnxRuntimeGpuBackend", "onnxruntime-gpu"),
    "tensorrt": ("tuner.backends.tensorrt.backend", "TensorRTBackend", "engine-tuner[tensorrt]"),
    "openvino": ("tuner.backends.openvino.backend", "OpenVinoBackend", "engine-tuner[openvino]"),
}
# What a process that only times a saved engine imports to load it (tuner.execute.engine_process): the runtime
# and the engine's loader, none of the builders; a backend without one is loaded through its Backend.load.
_RUNNERS: dict[str, str] = {"onnxruntime": "tuner.backends.onnxruntime.runner",
                            "openvino": "tuner.backends.openvino.runner"}
# Other distributions add backends through this entry point group, without editing this package:
#   [project.entry-points."engine_tuner.backends"]
#   mybackend = "my_package.backend:MyBackend"      # a subclass of tuner.backends.base.Backend
ENTRY_POINTS = "engine_tuner.backends"


@functools.cache
def _registry() -> dict[str, tuple[str, str, str]]:
    """Every backend name -> (module, class, what to pip install): the built-in ones, then those that
    installed distributions register (read once per process: scanning them takes milliseconds)."""
    out = dict(_BUILT_IN)
    for ep in entry_points(group=ENTRY_POINTS):
        if ep.name not in out:  # a built-in name is never taken over
            module, _, cls = ep.value.partition(":")
            out[ep.name] = (module.strip(), cls.strip(), ep.dist.name if ep.dist else module.split(".")[0])
    return out


def known_backends() -> list[str]:
    return sorted(_registry())


def get_backend(name: str) -> Backend:
    """The backend called `name`, imported on first use; a one-line UserError for an unknown name or
    a missing library."""
    registry = _registry()
    if name not in registry:
        raise UserError(f"unknown backend {name!r}; known backends: {', '.join(sorted(registry))}")
    module, cls, install = registry[name]
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        if _inside_tuner(exc):
            raise  # tuner's own code failed to import: a bug to see, never "not installed"
        raise UserError(f"backend {name}: its library is not installed ({exc.name or exc}); "
                        f"pip install \"{install}\"") from None
    backend = getattr(mod, cls)()
    if not isinstance(backend, Backend):
        raise UserError(f"backend {name}: {module}.{cls} is not a tuner.backends.base.Backend; "
                        "subclass it (its abstract methods are what the tuner needs)")
    return backend


def load_for_timing(name: str, engine_dir: str) -> Engine:
    """The saved engine in engine_dir, loaded to be timed: by the backend's runner module where it has one (its
    runtime alone: a fresh process starts in a fraction of a second), else by Backend.load."""
    if name in _RUNNERS:
        return importlib.import_module(_RUNNERS[name]).load(engine_dir)
    return get_backend(name).load(engine_dir)


def _inside_tuner(exc: ImportError) -> bool:
    """The import that failed was of tuner's own modules (a missing name, a renamed module), not of a
    backend's library. A library that is present but broken names its own module, not tuner's."""
    return (exc.name or "").split(".")[0] == __name__.split(".")[0]


def available_backends(names: Iterable[str] | None = None) -> list[str]:
    """The registered backends whose library imports here."""
    out = []
    for name in names or known_backends():
        try:
            get_backend(name)
        except UserError:
            continue
        out.append(name)
    return out


def backend_versions(names: Iterable[str]) -> dict[str, str]:
    """The library versions of every usable backend among `names` (a space's backends)."""
    out: dict[str, str] = {}
    for name in available_backends(names):
        out.update(get_backend(name).versions())
    return out


def backend_devices(names: Iterable[str]) -> dict[str, dict]:
    """device_info() of the usable backends that time on something other than the CPU (a GPU's model
    decides its timings; the CPU is in the fingerprint already)."""
    out: dict[str, dict] = {}
    for name in available_backends(names):
        backend = get_backend(name)
        if backend.device != "cpu":
            out[backend.device] = backend.device_info()
    return out


def highest_opset(backend: Backend, below: int) -> int:
    """The highest ai.onnx opset under `below` that backend.reads_opset accepts (0: none), by bisection."""
    low, high = 0, below  # reads low (0: by convention), not high
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if backend.reads_opset(mid) else (low, mid)
    return low


def repeat_runs(run: Callable[[], object], runs: int, max_seconds: float) -> None:
    """Up to `runs` calls, stopping after `max_seconds` (at least 3: a profiler's median needs them)."""
    end = time.perf_counter() + max_seconds
    for i in range(runs):
        run()
        if i >= 2 and time.perf_counter() > end:
            break
