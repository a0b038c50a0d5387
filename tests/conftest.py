import pytest

from tuner.demo import write_demo_model


@pytest.fixture(scope="session")
def demo_path(tmp_path_factory):
    return write_demo_model(str(tmp_path_factory.mktemp("demo") / "demo.onnx"))


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    import tuner.evaluate as ev

    monkeypatch.setattr(ev, "CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
