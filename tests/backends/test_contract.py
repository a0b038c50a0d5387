"""What every backend promises (tuner/backends/base.py), checked for each registered backend whose
library imports here and whose device is present; the others (tensorrt, onnxruntime-gpu without their
library, a GPU or the provider) skip with the reason. Real builds on the planted demo model."""
import os

import numpy as np
import pytest
from needs import backend_or_skip

from tuner.backends.base import Engine, engine_precision, known_backends
from tuner.execute.evaluate import build, check_accuracy
from tuner.problem.spec import load_problem

PLANTED = [f"block{b}/attn/{t}_proj" for b in (1, 3) for t in "qkv"]  # outlier inputs (tuner.cli.demo)


@pytest.fixture(scope="module")
def problem(tmp_path_factory):
    from tuner.cli.demo import write_demo_model

    path = write_demo_model(str(tmp_path_factory.mktemp("contract") / "planted.onnx"), outliers=2)
    return load_problem(path, shapes=["x=2x64x256"], require="cos<=0.0005", n_batches=2)


@pytest.fixture(params=known_backends())
def backend(request):
    return backend_or_skip(request.param)


def _engine(problem, backend, config, work):
    engine, used, _ = build(problem, {"backend": backend.name, **config}, str(work))
    assert used.name == backend.name
    return engine


def test_fp32_matches_the_reference_with_float32_outputs(problem, backend, tmp_path):
    engine = _engine(problem, backend, {"precision": "fp32", **backend.float32}, tmp_path)
    try:
        assert isinstance(engine, Engine)
        # what it computes in, where the engine can say (compute_precision is optional): float32 throughout here
        as_run = engine_precision(engine)
        assert "error" not in as_run and as_run.get("inference", "f32") == "f32", as_run
        assert as_run.get("quantized_nodes", 0) == 0, as_run
        out = engine.run(problem.batches[0])
        assert all(v.dtype == np.float32 for v in out.values()), {k: v.dtype for k, v in out.items()}
        metrics, _ = check_accuracy(problem, engine)
        assert metrics["cos"] < 1e-6 and metrics["rel_l2"] < 1e-4, metrics
        call = engine.timed_call(problem.batches[0])
        call()
        call()
    finally:
        engine.close()


def test_every_route_it_declares_builds_on_the_demo(problem, backend, tmp_path):
    """Every route in `routes` builds an engine of the demo encoder (MatMul, Softmax, LayerNorm: nothing exotic)
    whose outputs are float32: a declared route that refuses it is a bug in the backend's declaration."""
    assert "fp32" in backend.routes and set(backend.quantizing_routes) <= set(backend.routes)
    assert backend.knows("precision") and not backend.knows("no_such_knob_anywhere")
    assert backend.versions() and backend.name in backend.versions()
    built = []
    for route in backend.routes:
        engine = _engine(problem, backend, {"precision": route}, tmp_path / route)
        try:
            out = engine.run(problem.batches[0])
            assert all(v.dtype == np.float32 for v in out.values()), route
        finally:
            engine.close()
        built.append(route)
    assert built == list(backend.routes)


def test_keep_in_float_restores_accuracy_on_the_planted_demo(problem, backend, tmp_path):
    routes = [r for r in backend.quantizing_routes]
    if not routes:
        pytest.skip(f"{backend.name} has no quantizing route")
    route = routes[0]  # what is not quantized runs in float32, so the kept layers' error is int8's alone
    everything = _engine(problem, backend, {**backend.float32, "precision": route, "keep_float": []}, tmp_path / "all")
    kept = _engine(problem, backend, {**backend.float32, "precision": route, "keep_float": PLANTED}, tmp_path / "kept")
    try:
        err_all = check_accuracy(problem, everything)[0]["cos"]
        err_kept = check_accuracy(problem, kept)[0]["cos"]
    finally:
        everything.close()
        kept.close()
    assert err_kept < err_all / 3, (route, err_all, err_kept)


@pytest.mark.parametrize("folder", ["saved", "build"])  # build: the folder it was built in, where a trial saves it
def test_save_writes_a_loadable_engine(problem, backend, tmp_path, folder):
    engine = _engine(problem, backend, {"precision": "fp32"}, tmp_path / "build")
    try:
        before = engine.run(problem.batches[0])
        main = engine.save(str(tmp_path / folder))
    finally:
        engine.close()
    assert os.path.isfile(main)
    loaded = backend.load(str(tmp_path / folder))
    try:
        after = loaded.run(problem.batches[0])
    finally:
        loaded.close()
    for name, value in before.items():
        np.testing.assert_allclose(after[name], value, rtol=1e-4, atol=1e-5)
    scope = {"inputs": problem.batches[0]}
    exec(backend.usage(str(tmp_path / folder)), scope)  # the lines export writes for users, run as given
    for got, want in zip(scope["outputs"], before.values()):
        np.testing.assert_allclose(np.asarray(got, np.float32), want, rtol=1e-4, atol=1e-5)
