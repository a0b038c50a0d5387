import os
import shutil
import tempfile

import pytest

from tuner.cli.demo import write_demo_model

SESSION_DIR = pytest.StashKey[str]()


def pytest_configure(config):
    """One timing lock and one cache per test session, never the machine's: another test run or a
    tuner in another shell can neither hold up this session's timings nor change its cached results.
    Set before any forkserver or tuner child starts, so every process of the session inherits them."""
    session_dir = tempfile.mkdtemp(prefix="tuner-tests-")
    config.stash[SESSION_DIR] = session_dir
    os.environ["TUNER_LOCK_DIR"] = os.path.join(session_dir, "locks")
    os.environ["TUNER_CACHE"] = os.path.join(session_dir, "cache")
    config.addinivalue_line("markers", "timing: an end-to-end timing check; .ci/run runs these alone, at the end")


def pytest_unconfigure(config):
    """The session's lock and cache folder goes with the session."""
    shutil.rmtree(config.stash.get(SESSION_DIR, ""), ignore_errors=True)


@pytest.fixture(scope="session")
def demo_path(tmp_path_factory):
    return write_demo_model(str(tmp_path_factory.mktemp("demo") / "demo.onnx"))


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    """One cache for the session's tests, never the working directory's .tuner-cache."""
    monkeypatch.setenv("TUNER_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def write_masked_attention_model(path: str, hidden: int = 32, seq: int = 16, guarded: bool = False) -> str:
    """A BERT-style attention block whose mask becomes Where(mask, 0, -inf) added to the scores: the
    path where ORT's histogram calibrators see [-inf, inf]. Inputs x [batch, seq, hidden], mask [batch, seq].
    guarded: the probabilities pass Where(IsNaN(p), 0, p) before the MatMul with V, as torch.onnx.export
    writes transformers' SDPA attention (the guard of fully masked rows)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32), n)
             for n in ("wq", "wk", "wv", "wo")]
    inits += [numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
              numpy_helper.from_array(np.array(-np.inf, np.float32), "neg_inf"),
              numpy_helper.from_array(np.array([1], np.int64), "axis1")]
    n = helper.make_node
    nodes = [n("Cast", ["mask"], ["mask_b"], to=TensorProto.BOOL, name="mask_cast"),
             n("Where", ["mask_b", "zero", "neg_inf"], ["mask_add"], name="mask_where"),
             n("Unsqueeze", ["mask_add", "axis1"], ["mask_add3"], name="mask_unsqueeze"),
             n("MatMul", ["x", "wq"], ["q"], name="q_proj"), n("MatMul", ["x", "wk"], ["k"], name="k_proj"),
             n("MatMul", ["x", "wv"], ["v"], name="v_proj"), n("Transpose", ["k"], ["kt"], perm=[0, 2, 1], name="k_t"),
             n("MatMul", ["q", "kt"], ["scores"], name="scores"),
             n("Add", ["scores", "mask_add3"], ["masked"], name="mask_apply"),
             n("Softmax", ["masked"], ["probs"], axis=-1, name="softmax")]
    if guarded:
        nodes += [n("IsNaN", ["probs"], ["nan"], name="guard_isnan"),
                  n("Where", ["nan", "zero", "probs"], ["probs_safe"], name="guard_where")]
    nodes += [n("MatMul", ["probs_safe" if guarded else "probs", "v"], ["ctx"], name="context"),
              n("MatMul", ["ctx", "wo"], ["y"], name="out_proj")]
    graph = helper.make_graph(nodes, "masked_attention",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", seq, hidden]),
                               helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", seq])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", seq, hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


@pytest.fixture(scope="session")
def masked_attention_path(tmp_path_factory):
    return write_masked_attention_model(str(tmp_path_factory.mktemp("masked") / "masked.onnx"))


@pytest.fixture(scope="session")
def guarded_attention_path(tmp_path_factory):
    """Softmax -> IsNaN/Where -> MatMul: the shape today's PyTorch exporters write."""
    return write_masked_attention_model(str(tmp_path_factory.mktemp("guarded") / "guarded.onnx"), guarded=True)
