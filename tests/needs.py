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


def chromium_or_skip() -> str:
    """The path of the headless browser the report is rendered with."""
    path = shutil.which("chromium")
    if path is None:
        _missing("chromium is not installed (apt-get install -y chromium)", os.environ.get(BROWSER_ENV) == "1",
                 f"a browser ({BROWSER_ENV}=1)")
    return path
