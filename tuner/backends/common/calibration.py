"""ONNX Runtime's quantization tools as the backends use them: the calibration reader over the study's
batches, a quiet context for their progress output, and the op block lists of the fp16 rewrites."""
from __future__ import annotations

import contextlib
import io
import logging

from ...inputs.data import Batch

# The ops an fp16/bf16 rewrite may leave in float32 (the `*_block_list` parameters' choices).
FP16_BLOCK_LISTS = {"none": [], "norms": ["LayerNormalization"], "norms_softmax": ["LayerNormalization", "Softmax"]}


class BatchReader:
    """CalibrationDataReader over a list of batches."""

    def __init__(self, batches: list[Batch]):
        self._it = iter(batches)

    def get_next(self):
        return next(self._it, None)


@contextlib.contextmanager
def quiet_tools():
    """ORT's quantizers print calibration progress and warn through the root logger; keep the CLI readable."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        root.setLevel(level)
