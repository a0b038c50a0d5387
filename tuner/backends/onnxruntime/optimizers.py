"""The names of ONNX Runtime's graph optimizers, which `disable_<Name>` parameters turn off.

ORT takes any name in `disabled_optimizers` and silently ignores one it does not have, so a
misspelt or renamed optimizer would be a parameter that changes nothing. ORT has no API that lists
them; its verbose log names every graph transformer it runs while it builds a session, so a tiny
session in a child process (the log goes to the C++ side's stderr) tells them, once per ORT version
(cached). Rewrite rules run inside Level1/Level2_RuleBasedTransformer and are not logged: their names
are listed here from ORT's graph_transformer_utils.cc (GenerateRewriteRules).
"""
from __future__ import annotations

import difflib
import functools
import os
import re
import subprocess
import sys

import onnxruntime as ort

from ...store import cache

REWRITE_RULES = frozenset({
    "EliminateIdentity", "EliminateSlice", "UnsqueezeElimination", "EliminateDropout", "ExpandElimination",
    "CastElimination", "CastChainElimination", "PreShapeNodeElimination", "NoopElimination", "DivMulFusion",
    "FuseReluClip", "GemmSumFusion", "GemmTransposeFusion", "NotWhereFusion", "ConvAddFusion", "ConvMulFusion",
    "ConvBNFusion", "PadFusion", "MatmulBNFusion", "LabelEncoderFusion", "ClipQuantFusion", "ReluQuantFusion",
})
# Since ORT 1.2x some fusions exist once per level (GeluFusion -> GeluFusionL1, GeluFusionL2): a
# `disable_GeluFusion` turns off each of them, so a space keeps working across ORT versions.
LEVEL_SUFFIXES = ("L1", "L2")

# The probe ends with the process that waits for it, should that one be killed (tuner.execute.orphans).
_END_WITH_PARENT = """
try:
    from tuner.execute.orphans import end_with_parent
    end_with_parent({parent})
except ImportError:  # the tuner is not on this Python's path: a probe still ends on its own
    pass
"""
_PROBE = """
import onnxruntime as ort
from onnx import TensorProto, helper
io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("x", "y")]
graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "probe", io[:1], io[1:])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
so = ort.SessionOptions()
so.log_severity_level = 0
ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
"""


@functools.lru_cache(maxsize=1)
def optimizer_names() -> frozenset[str]:
    """Every optimizer name this ORT honours in disabled_optimizers; empty when the log could not be
    read (then nothing can be checked)."""
    key = f"ort-optimizers-{ort.__version__}.json"
    logged = cache.read_json(key)
    if not logged:
        try:
            probe = _END_WITH_PARENT.format(parent=os.getpid()) + _PROBE
            out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
            logged = sorted(set(re.findall(r"Applying graph transformer (\w+)", out.stderr + out.stdout)))
        except (OSError, subprocess.SubprocessError):
            logged = []
        if logged:
            cache.write_json(key, logged)
    return frozenset(logged) | REWRITE_RULES if logged else frozenset()


def disabled_names(name: str) -> list[str]:
    """The ORT optimizers a `disable_<name>` turns off: name itself and its per-level variants that exist."""
    names = optimizer_names()
    variants = [name] + [name + s for s in LEVEL_SUFFIXES]
    return [n for n in variants if n in names] or [name]


def is_optimizer(name: str) -> bool:
    names = optimizer_names()
    return not names or any(n in names for n in [name] + [name + s for s in LEVEL_SUFFIXES])


def unknown_optimizer(name: str) -> str:
    close = difflib.get_close_matches(name, sorted(optimizer_names()), n=3, cutoff=0.5)
    return (f"ONNX Runtime {ort.__version__} has no graph optimizer {name!r}"
            + (f"; close names: {', '.join(close)}" if close else ""))
