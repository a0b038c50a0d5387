"""ONNX Runtime's TensorRT and CUDA execution providers from a space config, and a session that is
really on the provider asked for.

ONNX Runtime falls back silently: asking for a provider it cannot use gives a session on the next one
in the list, in the end the CPU (1.32, CPU build: a UserWarning "Specified provider
'TensorrtExecutionProvider' is not in available provider names", then a CPU session; a GPU build
whose TensorRT or CUDA libraries fail to load logs an error and falls back the same way). So
`make_gpu_session` checks `session.get_providers()[0]` and raises a one-line error when the session
is not on the provider asked for: the trial fails with that reason instead of timing the CPU.
"""
from __future__ import annotations

import os
import re
import warnings
from typing import Any

import onnxruntime as ort

from ...errors import UserError
from ...inputs.model import shape_text

TRT_EP, CUDA_EP, CPU_EP = "TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"
PROVIDERS = {"tensorrt": TRT_EP, "cuda": CUDA_EP}
MIN_ORT = (1, 18)  # the first onnxruntime-gpu built for TensorRT 10; every option below but one exists there
# Space parameter -> TensorRT EP option (ONNX Runtime's TensorRT EP documentation).
TRT_OPTIONS = ("trt_fp16_enable", "trt_builder_optimization_level", "trt_auxiliary_streams",
               "trt_layer_norm_fp32_fallback", "trt_cuda_graph_enable")
# Options newer than MIN_ORT: the first version that has them (ONNX Runtime rejects unknown options).
OPTION_SINCE = {"trt_op_types_to_exclude": (1, 21)}  # microsoft/onnxruntime#23705
TRT_EXCLUDE_SETS = {  # trt_op_types_to_exclude choices: op types TensorRT leaves to the CUDA EP
    "none": "",  # ONNX Runtime's default: TensorRT takes every op it supports
    "dds": "NonMaxSuppression,NonZero,RoiAlign",  # data-dependent shapes, slow on TensorRT 10 (#23705)
    "norms": "LayerNormalization",
    "norms_softmax": "LayerNormalization,Softmax",
}
# Space parameter -> CUDA EP option.
CUDA_OPTIONS = {"cuda_cudnn_conv_algo_search": "cudnn_conv_algo_search", "cuda_use_tf32": "use_tf32",
                "cuda_enable_cuda_graph": "enable_cuda_graph"}
CACHE_KEYS = ("trt_timing_cache_enable", "trt_engine_cache_enable")  # set by the backend, not searched
KNOWN = {"provider", *TRT_OPTIONS, *OPTION_SINCE, *CUDA_OPTIONS, *CACHE_KEYS}


def ort_version(text: str = ort.__version__) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def split_options(config: dict[str, Any], version: tuple[int, int]) -> tuple[dict[str, Any], list[str]]:
    """(the config without the options this onnxruntime lacks, one line per option dropped)."""
    kept, dropped = {}, []
    for name, value in config.items():
        since = OPTION_SINCE.get(name)
        if since is not None and version < since:
            dropped.append(f"onnxruntime {version[0]}.{version[1]} has no TensorRT EP option {name} "
                           f"(onnxruntime {since[0]}.{since[1]}+): {name}={value} not set")
        else:
            kept[name] = value
    return kept, dropped


def provider_list(config: dict[str, Any], cache_dir: str, shapes: dict[str, tuple[int, ...]]) -> list:
    """InferenceSession providers for config['provider'] ('tensorrt' or 'cuda'), most wanted first."""
    provider = config.get("provider", "tensorrt")
    cuda = (CUDA_EP, {v: _opt(config[k]) for k, v in CUDA_OPTIONS.items() if k in config})
    if provider == "cuda":
        return [cuda, CPU_EP]
    if provider != "tensorrt":
        raise ValueError(f"provider {provider!r}: expected one of {sorted(PROVIDERS)}")
    return [(TRT_EP, trt_options(config, cache_dir, shapes)), cuda, CPU_EP]


def trt_options(config: dict[str, Any], cache_dir: str, shapes: dict[str, tuple[int, ...]]) -> dict[str, str]:
    """TensorRT EP options; the timing (and, when asked, engine) caches live in cache_dir."""
    opts = {k: _opt(config[k]) for k in TRT_OPTIONS if k in config}
    exclude = TRT_EXCLUDE_SETS[config.get("trt_op_types_to_exclude", "none")]
    if exclude:  # never sent at its default, so an onnxruntime without the option still runs the baseline
        opts["trt_op_types_to_exclude"] = exclude
    if config.get("trt_timing_cache_enable", True):
        opts.update(trt_timing_cache_enable="True", trt_timing_cache_path=cache_dir)
    if config.get("trt_engine_cache_enable", False):
        opts.update(trt_engine_cache_enable="True", trt_engine_cache_path=cache_dir)
    if shapes:  # min = opt = max: the study's shapes
        spec = ",".join(f"{n}:{shape_text(s)}" for n, s in shapes.items())
        opts.update(trt_profile_min_shapes=spec, trt_profile_opt_shapes=spec, trt_profile_max_shapes=spec)
    return opts


def _opt(value: Any) -> str:
    """ORT provider options are strings; booleans as 'True'/'False'."""
    return str(value)


def check_provider(active: list[str], requested: str) -> None:
    """Raise a one-line UserError unless the session's first provider is the requested one."""
    if not active or active[0] != requested:
        raise UserError(f"ONNX Runtime gave a session on {active[0] if active else 'no provider'}, not {requested} "
                        f"(it falls back silently when {requested} cannot load); install onnxruntime-gpu with the "
                        f"CUDA/TensorRT libraries it was built for, and check onnxruntime.get_available_providers()")


def portable(providers: list) -> list:
    """The provider list without this machine's cache paths: what a saved engine keeps (JSON lists)."""
    out = []
    for p in providers:
        name, opts = (p, {}) if isinstance(p, str) else p
        out.append([name, {k: v for k, v in opts.items() if not k.startswith(("trt_timing_cache", "trt_engine_cache"))}])
    return out


def make_gpu_session(model_path: str, providers: list,
                     session_options: ort.SessionOptions | None = None) -> ort.InferenceSession:
    """An InferenceSession on the first of `providers` (provider_list's form, or portable()'s), or a
    UserError saying why not."""
    providers = [p if isinstance(p, str) else (p[0], p[1]) for p in providers]
    requested = providers[0] if isinstance(providers[0], str) else providers[0][0]
    for _, opts in (p for p in providers if not isinstance(p, str)):
        if opts.get("trt_timing_cache_path"):
            os.makedirs(opts["trt_timing_cache_path"], exist_ok=True)
    with warnings.catch_warnings(record=True) as caught:  # ORT's "not in available provider names"
        warnings.simplefilter("always")
        session = ort.InferenceSession(model_path, session_options, providers=providers)
    try:
        check_provider(session.get_providers(), requested)
    except UserError as exc:
        hint = next((str(w.message) for w in caught if requested in str(w.message)), "")
        raise UserError(f"{exc}{' [' + hint + ']' if hint else ''}") from None
    return session
