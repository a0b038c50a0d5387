"""The ONNX Runtime CPU backend (backend.py), its engine as timing loads it (runner.py: ONNX Runtime alone),
its session options, precision routes, profiler and graph optimizer names. Light on purpose: a process that
only times a saved engine imports runner.py without the builders.

Its public surface is the names below, for another backend built on ONNX Runtime sessions (onnxruntime_gpu):
the rest of the package is its own and may change. Each loads on first use, so importing the package stays light."""
import importlib

_PUBLIC = {
    "OrtEngine": ".backend",  # a session engine: run, timed_call, save, node_times, compute_precision
    "file_precision": ".precision",  # the matrix ops of a model file, quantized or float
    "adapt_feed": ".session",  # a batch in the input types the session takes
    "read_engine_dir": ".session",  # (model path, settings) of a saved engine folder
    "write_settings": ".session",  # session_options.json beside the model
}
__all__ = list(_PUBLIC)


def __getattr__(name):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name], __name__), name)
    raise AttributeError(name)
