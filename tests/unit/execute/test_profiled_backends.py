"""Which backends `tuner profile` reads (tuner.execute.profiling): those whose Backend declares profiles_nodes,
refused before anything is built otherwise; an engine is asked for node_times only where it has them
(ProfilesNodes), as it is for its precision (ReportsPrecision)."""
import pytest

from tuner.backends.base import ProfilesNodes, ReportsPrecision, get_backend
from tuner.backends.onnxruntime.backend import OnnxRuntimeBackend
from tuner.errors import UserError
from tuner.execute.profiling import check_profiled, engine_node_times


class Timed:
    def node_times(self, batch, workdir, runs, max_seconds):
        return [{"name": "n", "op": "MatMul", "ms": float(runs), "originals": ["n"]}]


class Bare:
    def run(self, batch):
        return {}


def test_a_backend_that_declares_its_profiler_is_profiled_and_its_engine_asked(tmp_path):
    assert get_backend("onnxruntime").profiles_nodes is True
    check_profiled("onnxruntime")
    assert engine_node_times("onnxruntime", Timed(), {}, str(tmp_path / "w"), runs=3) == [
        {"name": "n", "op": "MatMul", "ms": 3.0, "originals": ["n"]}]
    assert (tmp_path / "w").is_dir()


def test_a_backend_without_a_profiler_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(OnnxRuntimeBackend, "profiles_nodes", False)
    with pytest.raises(UserError, match=r"^backend onnxruntime: no per-node profile here \(its Backend does not "
                                        r"declare profiles_nodes"):
        check_profiled("onnxruntime")


def test_an_engine_without_node_times_is_refused_though_its_backend_declares_them(tmp_path):
    with pytest.raises(UserError, match=r"^backend onnxruntime: declares profiles_nodes, but its engine has no node_times"):
        engine_node_times("onnxruntime", Bare(), {}, str(tmp_path))


def test_abilities_are_the_methods_an_engine_has():
    assert isinstance(Timed(), ProfilesNodes) and not isinstance(Bare(), ProfilesNodes)
    assert not isinstance(Bare(), ReportsPrecision)
