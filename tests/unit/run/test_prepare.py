"""Opening a new study (tuner.run.prepare): its objectives' names and the notes it stores. Nothing is
built here (the small space has no per-layer ranking)."""
import os

import pytest

from tuner.run.options import TuneOptions
from tuner.run.prepare import open_study
from tuner.space import SPACES_DIR


@pytest.mark.parametrize("objectives, timing, names", [
    ("latency,error", "alone", ["latency_ms", "error"]), ("latency", "alone", ["latency_ms"]),
    ("latency,error", "paired", ["latency_relative_to_baseline", "error"])])
def test_a_new_study_names_its_objectives(objectives, timing, names, demo_path, tmp_path):
    small = os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml")  # no per-layer ranking: nothing is built here
    ctx = open_study(TuneOptions(study="s", model=demo_path, storage=f"sqlite:///{tmp_path}/s.db", shapes=["x=2x64x256"],
                                 objectives=objectives, timing=timing, space=small))
    assert ctx.study.metric_names == names
    assert list(ctx.settings.notes) == ctx.problem.notes and len(ctx.settings.notes) == 2
