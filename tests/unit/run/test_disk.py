"""run.disk: the free-space warning before the first build, with the free space given (no real disk read)."""
from tuner.run.disk import BUILDS_AT_ONCE, disk_warning, engines_kept
from tuner.run.options import TuneOptions

MB = 1_000_000


def _opts(**kw) -> TuneOptions:
    return TuneOptions.of(**({"study": "s", "model": "m.onnx", "n_trials": 60, "top_k": 3} | kw))


def test_the_engines_a_study_holds_follow_what_it_keeps():
    assert engines_kept(_opts()) == BUILDS_AT_ONCE + 1  # the winner's engine
    assert engines_kept(_opts(keep_artifacts="finalists")) == BUILDS_AT_ONCE + 4
    assert engines_kept(_opts(keep_engines=True)) == BUILDS_AT_ONCE + 60 + 4  # every trial's, and the finalists'
    assert engines_kept(_opts(jobs=4, select=False)) == 4 * BUILDS_AT_ONCE


def test_a_warning_only_below_the_need(tmp_path):
    need = 90 * MB * engines_kept(_opts())
    assert disk_warning(_opts(), 90 * MB, str(tmp_path), free=lambda p: need) is None
    line = disk_warning(_opts(), 90 * MB, str(tmp_path / "studies" / "s-engines"), free=lambda p: need - 1)
    assert line.startswith(f"warning: {(need - 1) / MB:.0f} MB free on {tmp_path}, and this study will likely need "
                           f"about {need / MB:.0f} MB") and "--engines-dir" in line
