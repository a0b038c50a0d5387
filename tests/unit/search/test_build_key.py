"""A trial's build key (search.objective.build_key): what a build depends on, and only that. Two trials with the
same key reuse one measurement, so a key that missed a part would hand one engine's figures to another."""
import hashlib
import json
from dataclasses import replace

from tuner.measure.requirement import Requirement
from tuner.problem.spec import ProblemSpec
from tuner.search.objective import build_key
from tuner.search.settings import StudySettings

SETTINGS = StudySettings(ProblemSpec("/x/m.onnx", require="cos<=0.01"), Requirement.parse("cos<=0.01"), "model-hash",
                         data_hash="data-hash", backend="onnxruntime", machine={"versions": {"onnxruntime": "1.32.0"}})
CONFIG = {"precision": "int8-dynamic", "keep_float": ["a", "b"]}


def test_the_key_is_the_first_20_hex_digits_of_the_sha256_of_its_parts():
    payload = {"model": "model-hash", "data": "data-hash", "config": CONFIG,
               "versions": {"onnxruntime": "1.32.0"}, "backend": "onnxruntime"}
    expected = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:20]
    assert build_key(SETTINGS, CONFIG) == expected
    assert build_key(SETTINGS, dict(reversed(list(CONFIG.items())))) == expected  # the order of keys is no part


def test_every_part_changes_the_key():
    key = build_key(SETTINGS, CONFIG)
    others = [replace(SETTINGS, model_hash="other"), replace(SETTINGS, data_hash=None),
              replace(SETTINGS, backend="openvino"), replace(SETTINGS, machine={"versions": {"onnxruntime": "1.31.0"}})]
    assert all(build_key(s, CONFIG) != key for s in others)
    assert build_key(SETTINGS, CONFIG | {"keep_float": ["a"]}) != key
    # the machine's other facts are not part of a build (a build on another CPU is the same engine)
    assert build_key(replace(SETTINGS, machine=SETTINGS.machine | {"cpu": "other"}), CONFIG) == key
