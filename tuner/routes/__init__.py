"""Graph transformations: ONNX -> ONNX precision routes, backend-neutral."""
from .precision import apply_precision, QUANTIZING_ROUTES

__all__ = ["apply_precision", "QUANTIZING_ROUTES"]
