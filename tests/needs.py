"""What a test needs from the machine: a backend's library, a browser. Locally a missing one skips
with the reason; where CI requires it (TUNER_REQUIRE_BACKENDS=onnxruntime,openvino,
TUNER_REQUIRE_BROWSER=1) it fails, so a broken install can never turn a suite green by skipping."""
from __future__ import annotations

import os
import shutil

import pytest

from tuner.backends.base import get_backend
from tuner.errors import UserError

BACKENDS_ENV = "TUNER_REQUIRE_BACKENDS"
BROWSER_ENV = "TUNER_REQUIRE_BROWSER"
TORCH_ENV = "TUNER_REQUIRE_TORCH"  # torch (CPU build) and onnxscript: the GP sampler, the exporters' graphs


def required_backends() -> set[str]:
    return {b.strip() for b in os.environ.get(BACKENDS_ENV, "").split(",") if b.strip()}


def _missing(why: str, required: bool, what: str) -> None:
    if required:
        pytest.fail(f"{what} is required here ({why})", pytrace=False)
    pytest.skip(why)


def backend_or_skip(name: str):
    """The backend, or a skip that says why it cannot run here (no library, no GPU, provider
    missing); a failure instead where TUNER_REQUIRE_BACKENDS names it. An ImportError inside
    tuner's own code is raised by get_backend, never turned into a skip."""
    try:
        return get_backend(name)
    except UserError as exc:
        reason = str(exc)
        reason = reason if reason.startswith(f"backend {name}") else f"backend {name}: {reason}"
        _missing(reason, name in required_backends(), f"backend {name} ({BACKENDS_ENV})")


def library_or_skip(module: str, required: bool, install: str):
    """The imported module, or a skip that says how to install it; a failure instead where `required`."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        _missing(f"{module} does not import ({exc}): {install}", required, module)


def nncf_or_skip():
    """NNCF, which OpenVINO's quantizing routes need: required wherever OpenVINO is."""
    return library_or_skip("nncf", "openvino" in required_backends(), 'pip install -e ".[openvino]"')


def torch_or_skip():
    """PyTorch (the CPU build) and onnxscript (its dynamo exporter): required where TUNER_REQUIRE_TORCH=1."""
    required = os.environ.get(TORCH_ENV) == "1"
    library_or_skip("onnxscript", required, "pip install onnxscript")
    return library_or_skip("torch", required, "pip install torch==2.13.0 (a CPU build)")


def chromium_or_skip() -> str:
    """The path of the headless browser the report is rendered with."""
    path = shutil.which("chromium")
    if path is None:
        _missing("chromium is not installed (apt-get install -y chromium)", os.environ.get(BROWSER_ENV) == "1",
                 f"a browser ({BROWSER_ENV}=1)")
    return path
