"""The backend seam: what every inference compiler gives the tuner, and the registry that finds one by name.

A backend turns (model, config) into an Engine; the tuner only ever runs, times, saves and closes
engines. Nothing above this seam knows how an engine is built or which library builds it.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol, runtime_checkable

import numpy as np

from ..errors import UserError
from ..model import ModelFile

Batch = dict[str, np.ndarray]
Outputs = dict[str, np.ndarray]


def _no_phase(name: str) -> None:
    pass


@dataclass
class BuildContext:
    """What a build may use besides the model and the config."""

    workdir: str  # the engine's artifacts go here (created by the caller)
    shapes: dict[str, tuple[int, ...]]  # the study's concrete input shapes
    calib: list[Batch] = field(default_factory=list)  # calibration batches for static quantization
    calib_key: str = ""  # names cached calibration results (model hash + data hash)
    cache_dir: str = ".tuner-cache"  # calibration ranges, compile caches
    on_phase: Callable[[str], None] = _no_phase  # "calibration", "compile", ...: where a crash happened
    # The engine will be timed alternately with other live engines in one process (selection):
    # a backend whose idle engines keep threads spinning must stop them after each run.
    side_by_side: bool = False
    # The study whose trials share compile caches (TensorRT's timing cache); "" outside a study.
    study: str = ""


@runtime_checkable
class Engine(Protocol):
    """A built engine, loaded and ready to run."""

    def run(self, batch: Batch) -> Outputs:
        """One inference; float outputs come back as float32, so every engine compares to one reference."""

    def timed_call(self, batch: Batch) -> Callable[[], float | None]:
        """Stage the inputs once; each call of the result is one synchronised inference. A call that
        returns a float gives its own time in ms (a GPU's CUDA events); None: the wall clock times it."""

    def save(self, out_dir: str) -> str:
        """Write a loadable engine (artifact + the config it needs) into out_dir; return its main file."""

    def close(self) -> None:
        """Free the engine's memory and threads."""


@runtime_checkable
class Backend(Protocol):
    """An inference compiler as the tuner sees it."""

    name: str  # the space file's `backend:`
    device: str  # the key of the timing lock: "cpu", "cuda:0"
    routes: tuple[str, ...]  # the precision routes it realises (the `precision` parameter's choices)
    quantizing_routes: tuple[str, ...]  # routes that take a per-layer keep-in-float list
    # What `precision: fp32` needs besides to compute in float32 throughout: a config that leaves a
    # precision hint out gets the library's own default, which may be lower (OpenVINO: bf16 on a CPU
    # with BF16; TensorRT and CUDA: TF32).
    float32: dict

    def versions(self) -> dict[str, str]:
        """Library versions: part of the machine fingerprint and of every build key."""

    def device_info(self) -> dict:
        """What the device is (model, capabilities): timings from different devices never mix."""

    def knows(self, parameter: str) -> bool:
        """Whether a space parameter name is one of this backend's build settings or route options."""

    def build(self, model: ModelFile, config: dict, ctx: BuildContext) -> Engine:
        """Build the engine of `config` (a normalized space config) into ctx.workdir and load it."""

    def load(self, engine_dir: str) -> Engine:
        """Load an engine that Engine.save wrote, with the settings it was built with."""

    def usage(self, engine_dir: str) -> str:
        """A few lines of Python that load the saved engine with the backend's own library and run it on
        `inputs` (a dict of input name -> array), leaving the result in `outputs` (a list, in output order)."""


# Optional hooks; a backend without them leaves them out:
# - `node_times(model, batches, workdir) -> {node name: share of the run time}` for the sensitivity
#   profile.
# - `measured(model, ctx, median_ms, feasible)`, told after an engine in ctx.workdir was timed
#   (tuner.evaluate.measure); TensorRT keeps the fastest feasible engine's tactics for later trials.
# - `why_unknown(parameter) -> str`, what is wrong with a parameter knows() refused (one phrase).
# - `adapt(param) -> (param or None, reason)`: the space parameter (tuner.space.Param, looked at by its
#   config key) as this device can run it: choices that would build the same engine as another
#   (a bf16 hint on a CPU without BF16) dropped, None for a parameter that changes nothing here, the
#   default set to the library's own default on this device. `reason` says in one sentence what was
#   dropped and why ("" when nothing was); it is shown to the user once.
# - `route_variants(route, attention) -> [options]`: the accuracy-relevant option sets (config keys; {} =
#   the space's defaults) of a quantizing route, each built all-quantized before layers are ranked
#   (tuner.variants); attention: the model has the scaled dot-product pattern (tuner.attention).
#   Without it, a route has one variant: the space's defaults.
# - `quantized_settings: dict`: settings (config keys) an expert gives a quantized engine where the
#   adapted space offers them (OpenVINO: bf16 for the float parts on a CPU with BF16, static shapes); the
#   variants, the ranking and its enqueued greedy trial use them.


# name -> (module, class, the pip extra or package that brings its library)
_REGISTRY: dict[str, tuple[str, str, str]] = {
    "onnxruntime": ("tuner.backends.onnxruntime", "OnnxRuntimeBackend", "onnxruntime"),
    "onnxruntime-gpu": ("tuner.backends.onnxruntime_gpu", "OnnxRuntimeGpuBackend", "onnxruntime-gpu"),
    "tensorrt": ("tuner.backends.tensorrt", "TensorRTBackend", "engine-tuner[tensorrt]"),
    "openvino": ("tuner.backends.openvino", "OpenVinoBackend", "engine-tuner[openvino]"),
}


def known_backends() -> list[str]:
    return sorted(_REGISTRY)


def get_backend(name: str) -> Backend:
    """The backend called `name`, imported on first use; a one-line UserError for an unknown name or
    a missing library."""
    if name not in _REGISTRY:
        raise UserError(f"unknown backend {name!r}; known backends: {', '.join(known_backends())}")
    module, cls, install = _REGISTRY[name]
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        if _inside_tuner(exc):
            raise  # tuner's own code failed to import: a bug to see, never "not installed"
        raise UserError(f"backend {name}: its library is not installed ({exc.name or exc}); "
                        f"pip install \"{install}\"") from None
    return getattr(mod, cls)()


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
