"""ONNX Runtime's graph optimizer names (tuner.backends.onnxruntime.optimizers) as the space's
disable_* parameters become the session's disabled optimizers."""
from tuner.backends.base import get_backend
from tuner.backends.onnxruntime.optimizers import optimizer_names
from tuner.backends.onnxruntime.session import session_settings


def test_disable_gelu_fusion_turns_off_each_per_level_gelu_fusion_of_this_ort():
    names = optimizer_names()
    assert "MatMulAddFusion" in names and "EliminateIdentity" in names
    ort = get_backend("onnxruntime")
    assert ort.knows("disable_GeluFusion") and ort.knows("disable_MatMulAddFusion") and not ort.knows("disable_Nope")
    disabled = session_settings({"disable_GeluFusion": True, "disable_MatMulAddFusion": True})["disabled_optimizers"]
    expected = sorted(n for n in ("GeluFusion", "GeluFusionL1", "GeluFusionL2") if n in names)
    assert expected and set(expected) <= set(disabled) and "MatMulAddFusion" in disabled
