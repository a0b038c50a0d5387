"""ONNX Runtime's silent fall-back from a GPU provider is caught, checked with the CPU build of onnxruntime
(what 1.32 does: a UserWarning, then a session on the CPU); the provider options and their version gates."""
import warnings

import onnxruntime as ort
import pytest

from tuner.backends.onnxruntime_gpu.providers import (
    CPU_EP,
    CUDA_EP,
    TRT_EP,
    check_provider,
    make_gpu_session,
    portable,
    provider_list,
    split_options,
    trt_options,
)
from tuner.errors import UserError


@pytest.mark.skipif(TRT_EP in ort.get_available_providers(), reason="this onnxruntime has the TensorRT provider")
def test_ort_falls_back_to_the_cpu_with_only_a_warning(demo_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = ort.InferenceSession(demo_path, providers=[TRT_EP, CPU_EP])
    assert s.get_providers() == [CPU_EP]
    assert any("not in available provider names" in str(w.message) for w in caught)


@pytest.mark.parametrize("provider, name", [("tensorrt", TRT_EP), ("cuda", CUDA_EP)])
def test_a_session_not_on_the_provider_asked_for_is_refused(demo_path, tmp_path, provider, name):
    if name in ort.get_available_providers():
        pytest.skip(f"{name} is available here")
    providers = provider_list({"provider": provider, "trt_fp16_enable": True}, str(tmp_path / "c"), {"x": (8, 64, 256)})
    with pytest.raises(UserError) as e:
        make_gpu_session(demo_path, providers)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"ONNX Runtime gave a session on {CPU_EP}, not {name}")
    assert "not in available provider names" in msg  # ORT's own warning is carried along
    with pytest.raises(UserError):  # the saved (portable) form is checked the same way on load
        make_gpu_session(demo_path, portable(providers))


def test_check_provider():
    check_provider([TRT_EP, CPU_EP], TRT_EP)
    with pytest.raises(UserError):
        check_provider([CUDA_EP, CPU_EP], TRT_EP)
    with pytest.raises(UserError):
        check_provider([], TRT_EP)


def test_provider_options(tmp_path):
    opts = trt_options({"trt_fp16_enable": True, "trt_builder_optimization_level": 5, "trt_auxiliary_streams": 0,
                        "trt_op_types_to_exclude": "norms", "trt_engine_cache_enable": True},
                       str(tmp_path), {"x": (8, 64, 256)})
    assert opts["trt_fp16_enable"] == "True" and opts["trt_builder_optimization_level"] == "5"
    assert opts["trt_op_types_to_exclude"] == "LayerNormalization"
    assert opts["trt_timing_cache_path"] == opts["trt_engine_cache_path"] == str(tmp_path)
    assert opts["trt_profile_min_shapes"] == opts["trt_profile_max_shapes"] == "x:8x64x256"
    assert "trt_op_types_to_exclude" not in trt_options({"trt_op_types_to_exclude": "none"}, str(tmp_path), {})
    providers = provider_list({"provider": "cuda", "cuda_use_tf32": False}, str(tmp_path), {})
    assert providers == [(CUDA_EP, {"use_tf32": "False"}), CPU_EP]
    saved = portable(provider_list({"provider": "tensorrt"}, str(tmp_path), {}))
    assert saved[0][0] == TRT_EP and not any(k.startswith("trt_timing_cache") for k in saved[0][1])


def test_an_option_the_installed_version_lacks_is_dropped_with_one_line():
    config = {"provider": "tensorrt", "trt_op_types_to_exclude": "dds", "trt_fp16_enable": True}
    kept, dropped = split_options(config, (1, 20))
    assert kept == {"provider": "tensorrt", "trt_fp16_enable": True}
    assert dropped == ["onnxruntime 1.20 has no TensorRT EP option trt_op_types_to_exclude (onnxruntime 1.21+): "
                       "trt_op_types_to_exclude=dds not set"]
    assert split_options(config, (1, 21)) == (config, [])
