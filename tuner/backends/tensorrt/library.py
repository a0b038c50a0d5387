"""Importing TensorRT lazily (one line naming what to install when it does not load), and its versions.

The backend module imports without TensorRT; `import tensorrt` happens when a backend object is made,
so a machine without TensorRT gets one line that says what to install, never a traceback.
"""
from __future__ import annotations

import re
from types import ModuleType

from ...errors import UserError

Version = tuple[int, int, int]

INSTALL_HINT = ('pip install "engine-tuner[tensorrt]" (tensorrt and cuda-python; "tensorrt-cu12" or "tensorrt-cu13" '
                'instead of tensorrt to match the CUDA driver)')
MIN_VERSION: Version = (10, 0, 0)


def parse_version(text: str) -> Version:
    """'10.8.0.43' -> (10, 8, 0); '11.1' -> (11, 1, 0). Raises ValueError on text without a major.minor."""
    m = re.match(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        raise ValueError(f"not a TensorRT version: {text!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def format_version(v: Version) -> str:
    return ".".join(map(str, v)) if v[2] else f"{v[0]}.{v[1]}"


def missing_message(exc: BaseException) -> str:
    """The one line for a TensorRT that does not import: the package is absent, or its libraries are
    (the tensorrt-cuXX-bindings wheel imports libnvinfer.so from tensorrt-cuXX-libs)."""
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, ImportError) and getattr(exc, "name", None) == "tensorrt":
        what = "the TensorRT Python package is not installed"
    else:
        what = f"TensorRT does not load ({detail})"
    return f"backend tensorrt: {what}; {INSTALL_HINT}"


def import_tensorrt() -> ModuleType:
    """`import tensorrt`, or a UserError with one line naming what to install."""
    try:
        import tensorrt  # deliberately lazy: the backend module imports everywhere
    except (ImportError, OSError) as exc:  # OSError: a shared library of TensorRT is missing
        raise UserError(missing_message(exc)) from None
    version = parse_version(tensorrt.__version__)
    if version < MIN_VERSION:
        raise UserError(f"backend tensorrt: TensorRT {tensorrt.__version__} is too old; the backend needs "
                        f"{format_version(MIN_VERSION)} or newer; {INSTALL_HINT}")
    return tensorrt


def version_of(trt: ModuleType) -> Version:
    return parse_version(trt.__version__)
