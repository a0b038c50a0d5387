"""Which TensorRT knobs each version has (tuner.backends.tensorrt.knobs), without TensorRT: versions taken
from the shipped Python bindings (see the README), the one-line drop notes, and the space file's knobs.
Nothing here stands in for what TensorRT computes."""
import os

import pytest

from tuner.backends.tensorrt.knobs import KNOBS, knows, split_config, unsupported
from tuner.backends.tensorrt.library import parse_version
from tuner.inputs.space import SPACES_DIR, load_space

CONFIG = {
    "precision": "fp16", "builder_optimization_level": 4, "tiling_optimization_level": "fast", "max_num_tactics": 16,
    "tactic_cublas": True, "tactic_jit_convolutions": False, "typing": "weak", "pin_tactics": True,
    "route/conv_use_long_w": "off", "cuda_graph": True,
}


def dropped_names(version: str) -> set[str]:
    kept, dropped = split_config(CONFIG, parse_version(version))
    assert set(kept) | {line.split(" has no ")[1].split(" ")[0] for line in dropped} == set(CONFIG)
    assert all("\n" not in line and line.startswith("tensorrt ") for line in dropped)
    return set(CONFIG) - set(kept)


@pytest.mark.parametrize("version, dropped", [
    ("10.3.0", {"tiling_optimization_level", "max_num_tactics", "pin_tactics", "route/conv_use_long_w"}),
    ("10.4.0", {"tiling_optimization_level", "pin_tactics", "route/conv_use_long_w"}),
    ("10.8.0.43", {"route/conv_use_long_w"}),
    ("10.16.1.11", {"route/conv_use_long_w"}),
    ("11.0.0.114", {"tactic_cublas", "typing", "route/conv_use_long_w"}),
    ("11.1.0.106", {"tactic_cublas", "typing"}),
    ("11.4.0.106", {"tactic_cublas", "typing"}),
])
def test_a_knob_the_version_lacks_is_dropped(version, dropped):
    assert dropped_names(version) == dropped


def test_drop_line_names_the_api_and_versions():
    _, dropped = split_config({"max_num_tactics": 16, "tactic_cudnn": True}, parse_version("11.0"))
    assert dropped == ["tensorrt 11.0 has no tactic_cudnn (IBuilderConfig.set_tactic_sources(mask | 1 << "
                       "int(TacticSource.CUDNN)); TensorRT 10.0-11.0 (excl.)): tactic_cudnn=True not set"]
    _, dropped = split_config({"max_num_tactics": 16}, parse_version("10.3.0"))
    assert "IBuilderConfig.max_num_tactics; TensorRT 10.4+" in dropped[0]
    assert unsupported(["precision", "tiling_optimization_level", "route/x"], parse_version("10.7")) == [
        "tiling_optimization_level", "route/x"]


def test_knows_every_name_whatever_the_version():
    assert all(knows(n) for n in list(KNOBS) + ["precision", "route/anything", "int8_op_types"])
    assert not knows("intra_op_num_threads")
    assert parse_version("10.8.0.43") == (10, 8, 0) and parse_version("11.1") == (11, 1, 0)
    with pytest.raises(ValueError):
        parse_version("dev")


def test_the_space_file_names_known_knobs_with_their_versions():
    path = os.path.join(SPACES_DIR, "tensorrt.yaml")
    space = load_space(path)
    assert all(knows(p.name) for p in space.params)
    text = open(path).read()
    for p in space.params:
        knob = KNOBS.get(p.name)
        if knob is not None and knob.since > (10, 0, 0):
            assert f"({knob.versions().split(' ')[0]})" in text, p.name  # e.g. "(10.8+)" in its comment
