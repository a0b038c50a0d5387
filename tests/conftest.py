import pytest

from tuner.demo import write_demo_model


@pytest.fixture(scope="session")
def demo_path(tmp_path_factory):
    return write_demo_model(str(tmp_path_factory.mktemp("demo") / "demo.onnx"))


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    """One cache for the session's tests, never the working directory's .tuner-cache."""
    monkeypatch.setenv("TUNER_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
