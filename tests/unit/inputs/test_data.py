"""The one reader of a user's .npz (tuner.inputs.data.read_npz) and its count of NaN or infinite values, shared by
--data / --calib-data (load_npz_batches) and --ref-outputs (ref_outputs.load_ref_outputs)."""
import numpy as np
import pytest

from tuner.errors import UserError
from tuner.inputs.data import nonfinite_count, read_npz


def test_read_npz_gives_every_array_and_refuses_what_numpy_cannot_read(tmp_path):
    path = tmp_path / "d.npz"
    np.savez(path, x=np.ones((2, 3), np.float32), ids=np.arange(4))
    arrays = read_npz(str(path), "data", "hint")
    assert sorted(arrays) == ["ids", "x"] and arrays["x"].shape == (2, 3)
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(UserError, match=r"^--ref-outputs .*bad\.npz: not a readable \.npz file"):
        read_npz(str(tmp_path / "bad.npz"), "reference outputs", "hint", "--ref-outputs")
    with pytest.raises(UserError, match=r"^/.*bad\.npz: not a readable \.npz file"):
        read_npz(str(tmp_path / "bad.npz"), "data", "hint")
    with pytest.raises(UserError, match="no such data file; give one"):
        read_npz(str(tmp_path / "missing.npz"), "data", "give one")


def test_nonfinite_count_counts_nan_and_inf_of_floats_only():
    assert nonfinite_count(np.array([1.0, np.nan, np.inf, -np.inf], np.float32)) == 3
    assert nonfinite_count(np.ones(3, np.float16)) == 0 and nonfinite_count(np.arange(3)) == 0
