"""The CUDA runtime wrapper (tuner.backends.common.cuda_rt) without a GPU: the version text."""
from tuner.backends.common.cuda_rt import cuda_version_text


def test_cuda_version_text():
    assert cuda_version_text(12080) == "12.8" and cuda_version_text(13000) == "13.0"
