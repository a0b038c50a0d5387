"""The GPU backends on a machine that cannot run them: one line that says what is missing and what to
install, from the registry, the backend, `tuner routes` and a study on their space."""
import builtins
import os
import sys

import onnxruntime as ort
import pytest

from tuner.backends.base import available_backends, get_backend, known_backends
from tuner.backends.common.cuda_rt import load_runtime
from tuner.backends.tensorrt.library import import_tensorrt
from tuner.cli.main import main
from tuner.errors import UserError
from tuner.inputs.space import SPACES_DIR

GPU_PROVIDERS = {"TensorrtExecutionProvider", "CUDAExecutionProvider"} & set(ort.get_available_providers())


def test_both_are_registered_and_their_modules_import_without_their_libraries():
    assert {"tensorrt", "onnxruntime-gpu"} <= set(known_backends())
    import tuner.backends.onnxruntime_gpu  # noqa: F401  (no tensorrt, no GPU needed to import)
    import tuner.backends.tensorrt.backend  # noqa: F401


def test_no_tensorrt_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # as where it is not installed (its import raises ImportError)
    with pytest.raises(UserError) as e:
        get_backend("tensorrt")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("backend tensorrt: the TensorRT Python package is not installed")
    assert 'pip install "engine-tuner[tensorrt]"' in msg and "tensorrt-cu13" in msg
    assert "tensorrt" not in available_backends()


def test_bindings_without_their_libraries(monkeypatch):
    """The bindings wheel installed without tensorrt-cuXX-libs: its import fails on libnvinfer."""
    real_import = builtins.__import__

    def failing_import(name, *args, **kwargs):
        if name == "tensorrt":
            raise ImportError("libnvinfer.so.11: cannot open shared object file: No such file or directory",
                              name="tensorrt_bindings.tensorrt")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "tensorrt", raising=False)
    monkeypatch.setattr(builtins, "__import__", failing_import)
    with pytest.raises(UserError, match=r"^backend tensorrt: TensorRT does not load \(libnvinfer.so.11: cannot open"):
        import_tensorrt()


def test_too_old(monkeypatch):
    old = type(sys)("tensorrt")
    old.__version__ = "8.6.1"
    monkeypatch.setitem(sys.modules, "tensorrt", old)
    with pytest.raises(UserError, match="TensorRT 8.6.1 is too old; the backend needs 10.0 or newer"):
        import_tensorrt()


def test_no_cuda_runtime(monkeypatch):
    for name in ("cuda", "cuda.bindings", "cuda.bindings.runtime", "cuda.cudart", "torch"):
        monkeypatch.setitem(sys.modules, name, None)  # their import raises ImportError
    with pytest.raises(UserError) as e:
        load_runtime()
    assert "\n" not in str(e.value) and 'pip install "cuda-python"' in str(e.value)


@pytest.mark.skipif(bool(GPU_PROVIDERS), reason="this onnxruntime has a GPU provider")
def test_onnxruntime_without_gpu_providers():
    with pytest.raises(UserError) as e:
        get_backend("onnxruntime-gpu")
    msg = str(e.value)
    assert "\n" not in msg and f"this onnxruntime ({ort.__version__}) has no GPU provider" in msg
    assert "pip install onnxruntime-gpu" in msg


def test_commands_say_it_in_one_line(demo_path, capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # as where it is not installed
    monkeypatch.chdir(tmp_path)
    assert main(["routes", demo_path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install" in err and "Traceback" not in err
    assert main(["evaluate", demo_path, "--space", os.path.join(SPACES_DIR, "tensorrt.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "backend tensorrt: the TensorRT Python package is not installed" in err
