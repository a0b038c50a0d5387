"""dir_bytes (tuner.inputs.user_paths): the one sum of a folder's file sizes (a trial's engine, the engines
folder in `tuner status`, the artifact store)."""
import os

from tuner.inputs.user_paths import dir_bytes


def test_dir_bytes_sums_every_file_below_and_skips_what_is_not_a_file(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 10)
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / "sub" / "b").write_bytes(b"y" * 5)
    (tmp_path / "sub" / "deeper" / "c").write_bytes(b"z" * 7)
    os.symlink(tmp_path / "gone", tmp_path / "dangling")
    assert dir_bytes(str(tmp_path)) == 22
    assert dir_bytes(str(tmp_path / "missing")) == 0
