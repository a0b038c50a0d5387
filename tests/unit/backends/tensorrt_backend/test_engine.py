"""Tensor types of a TensorRT engine's inputs and outputs (tuner.backends.tensorrt.engine, .bf16), without
TensorRT: bf16 rounding to nearest even and the numpy types of each TensorRT data type."""
import numpy as np
import pytest

from tuner.backends.common.bf16 import bf16_bits_to_float32, float32_to_bf16_bits
from tuner.backends.tensorrt.engine import np_dtype, to_engine, to_float32


def test_tensor_types_and_bf16_rounding():
    x = np.array([1.0, 1.00390625, 1.01171875, -3.14159, 1e30, np.nan, 0.0], dtype=np.float32)
    y = bf16_bits_to_float32(float32_to_bf16_bits(x))
    assert y[0] == 1.0 and y[1] == 1.0  # tie to even
    assert y[2] == np.float32(1.015625)  # above the tie: rounds up
    assert abs(y[3] + 3.140625) < 1e-7 and np.isnan(y[5]) and y[6] == 0.0
    assert np.allclose(y[4], 1e30, rtol=2 ** -8)
    assert np_dtype("HALF") == np.float16 and np_dtype("BF16") == np.uint16
    bits = to_engine(np.array([1.5, -2.0], dtype=np.float32), "BF16")
    assert bits.dtype == np.uint16 and to_float32(bits, "BF16").tolist() == [1.5, -2.0]
    assert to_float32(np.ones(2, np.float16), "HALF").dtype == np.float32
    with pytest.raises(TypeError):
        np_dtype("FP8")
