"""engine-tuner: search the build space of an ONNX model for the fastest engine that is accurate enough."""
import importlib

__version__ = "0.1.0"

_API = ("tune", "load_study", "select", "export")


def __getattr__(name):
    # Lazy, so `import tuner` (and the CLI's start-up) does not pay for Optuna and ONNX Runtime.
    if name in _API:
        return getattr(importlib.import_module(".api", __name__), name)
    raise AttributeError(name)
