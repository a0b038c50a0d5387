"""A study's TensorRT timing-cache files (tuner.backends.tensorrt.timing_cache), without TensorRT: the
tactics file, one cache folder per study, version and GPU, and the fastest feasible engine's cache kept
for pinning."""
import os

import pytest

from tuner.backends.tensorrt import timing_cache as tc

K1, K2 = "0x" + "ab" * 16, "0x" + "01" * 16


def test_tactics_file_round_trip():
    text = tc.encode_tactics({K1: (0x665DED9ABBF88, 0.011264), K2: (2**63 + 5, 1.5)}, {"tensorrt": "11.1"})
    assert '"tactic": "0x665ded9abbf88"' in text  # hashes as hex: they do not fit in a double
    assert tc.decode_tactics(text) == {K1: (0x665DED9ABBF88, 0.011264), K2: (2**63 + 5, 1.5)}
    with pytest.raises(ValueError, match="not a timing cache key"):
        tc.encode_tactics({"0x12": (1, 1.0)})


def test_caches_are_per_study_version_and_gpu(tmp_path):
    a = tc.scope_dir(str(tmp_path), "bert", "10.8.0.43", "NVIDIA H200")
    assert a.endswith(os.path.join("tensorrt", "bert", "10.8.0.43-nvidia-h200"))
    assert len({a, tc.scope_dir(str(tmp_path), "bert-tpe", "10.8.0.43", "NVIDIA H200"),
                tc.scope_dir(str(tmp_path), "bert", "10.8.0.43", "NVIDIA A100")}) == 3


def test_the_fastest_feasible_engine_is_kept_for_pinning(tmp_path):
    scope = str(tmp_path / "scope")
    engines = {}
    for name, data in (("a", b"cache-a"), ("b", b"cache-b"), ("c", b"cache-c")):
        engines[name] = tmp_path / name
        engines[name].mkdir()
        (engines[name] / tc.CACHE_FILE).write_bytes(data)
    (engines["a"] / tc.TACTICS_FILE).write_text("{}")
    assert tc.offer_best(str(engines["a"]), scope, 5.0)
    assert not tc.offer_best(str(engines["b"]), scope, 6.0)  # slower: the best stays
    assert tc.read_bytes(os.path.join(scope, tc.BEST_CACHE)) == b"cache-a"
    assert tc.offer_best(str(engines["c"]), scope, 4.0)
    assert tc.read_bytes(os.path.join(scope, tc.BEST_CACHE)) == b"cache-c"
    assert not os.path.exists(os.path.join(scope, tc.BEST_TACTICS))  # a's tactics went with a
    assert not tc.offer_best(str(tmp_path), scope, 1.0)  # built without a timing cache: nothing to keep
