"""engine-tuner: search the build space of an ONNX model for the fastest engine that is accurate enough."""
__version__ = "0.1.0"
