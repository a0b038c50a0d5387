"""Real studies on the demo model: real ONNX Runtime builds in child processes, real SQLite files."""
import json
import os
import re

import optuna
import pytest
from optuna.trial import TrialState

from tuner.cli.demo import write_demo_model
from tuner.cli.main import main
from tuner.errors import UserError
from tuner.measure.latency import LatencyProtocol
from tuner.run.options import TuneOptions
from tuner.run.tune import tune_study
from tuner.search.trials import is_feasible

FAST = LatencyProtocol(warmup=1, min_runs=3, max_runs=8, max_seconds=1)


DEFAULT_SPACE_TEXT = open(os.path.join(os.path.dirname(__file__), "..", "..", "search_spaces", "onnxruntime-cpu.yaml")).read()


def independent_space(tmp_path, text: str = DEFAULT_SPACE_TEXT, name: str = "independent.yaml") -> str:
    """The default space with one boolean per layer: these tests are about studies, not the ranking
    (tests/integration/test_tune_with_defaults.py runs the default space as it ships)."""
    path = tmp_path / name
    path.write_text(text.replace("encoding: auto", "encoding: independent"))
    return str(path)


def options(tmp_path, model=None, **kw):
    # ONNX Runtime's space: the default where OpenVINO is installed is cpu.yaml (tests/integration/test_tune_across_backends.py)
    base = dict(study="s", model=model, storage=f"sqlite:///{tmp_path}/s.db", shapes=["x=2x64x256"],
                require="cos<=0.005", seed=0, protocol=FAST, progress=False, quiet=True, top_k=2,
                space=independent_space(tmp_path) if model else None)
    base.update(kw)
    return TuneOptions.of(**base)


def trials(tmp_path, name="s"):
    return optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path}/s.db").trials


def test_study_finds_a_winner_and_resumes(demo_path, tmp_path):
    opts = options(tmp_path, demo_path, n_trials=4, enqueue=["precision=int8-dynamic"])
    first = tune_study(opts)
    study = first.study
    before = [t.values for t in study.trials]
    assert len(before) == 4
    base = [t for t in study.trials if t.user_attrs.get("baseline")]
    assert [t.number for t in base] == [0] and base[0].params["precision"] == "fp32"
    assert study.trials[1].params["precision"] == "int8-dynamic"
    winner = first.winner
    assert winner is not None
    # the winner is the fastest confirmed feasible finalist, or a simpler one that ties it within noise;
    # its speedup is its own confirmed ratio
    finalists = {f["trial"]: f for f in winner["finalists"] if f["feasible"]}
    fastest = min(finalists.values(), key=lambda f: f["relative"]["ratio"])
    chosen = finalists[winner["trial"]]
    if chosen is not fastest:
        assert winner["tie"] and fastest["trial"] in winner["tie"]["trials"], winner
        assert chosen["relative"]["ci_low"] <= fastest["relative"]["ci_high"] and chosen["choices"] <= fastest["choices"]
    assert winner["speedup"] == pytest.approx(1.0 / chosen["relative"]["ratio"])
    low, high = winner["speedup_interval"]
    assert low <= winner["speedup"] <= high
    assert winner["confirmed_metrics"]["cos"] <= 0.005
    assert study.user_attrs["winner"]["trial"] == winner["trial"]
    settings = study.user_attrs["tuner_settings"]
    assert settings["require"] == "cos<=0.005" and settings["sampler"] == "tpe"
    assert settings["sampler_options"]["multivariate"] is True and settings["sampler_options"]["group"] is True
    for t in study.trials:
        assert t.state == TrialState.COMPLETE
        assert set(t.user_attrs) >= {"config", "build_key", "latency", "metrics", "build_s", "engine_bytes", "machine"}
        assert set(t.constraints) == {"cos<=0.005"}
    # each engine timed in a process of its own: the candidate in a fresh one per trial, the baseline in one
    # kept across trials (BASELINE_TRIALS), none of them this process; a trial stopped by a slow run in its
    # accuracy check was never timed, so no process is recorded for it
    fresh = [t for t in study.trials if "reused_from" not in t.user_attrs]
    slow = [t for t in fresh if t.user_attrs["relative"].get("stopped") == "slow run"]
    assert all("processes" not in t.user_attrs for t in slow)
    measured = [t.user_attrs["processes"] for t in fresh if t not in slow]
    assert len(measured) >= 2 and all(p["candidate"] != p["baseline"] for p in measured)
    assert len({p["candidate"] for p in measured}) == len(measured)
    # the search's trials (after the defaults' own run) share one baseline process, save where a window above
    # the band retired it: a's last window still above (disturbed), or b's first window above and timed again
    search = [t for t in fresh[1:] if t not in slow]
    for a, b in zip(search, search[1:]):
        kept = not (a.user_attrs.get("baseline_guard") or {}).get("disturbed") \
            and not (b.user_attrs.get("baseline_guard") or {}).get("retimed")
        assert (a.user_attrs["processes"]["baseline"] == b.user_attrs["processes"]["baseline"]) == kept
    assert os.getpid() not in {pid for p in measured for pid in p.values()}
    # selection: every finalist in a process of its own
    pids = [f["process"] for f in winner["finalists"]]
    assert len(set(pids)) == len(pids) >= 2 and os.getpid() not in pids

    again = tune_study(TuneOptions.of(study="s", storage=opts.storage, n_trials=2, protocol=FAST, progress=False,
                             quiet=True, select=False))
    after = again.study.trials
    assert len(after) == 6
    assert [t.number for t in after if t.user_attrs.get("baseline")] == [0]
    assert [t.values for t in after[:4]] == before


def test_settings_mismatch_is_refused(demo_path, tmp_path):
    tune_study(options(tmp_path, demo_path, n_trials=1, select=False))
    other = write_demo_model(str(tmp_path / "other.onnx"), outliers=1)
    with pytest.raises(UserError, match="was made for another model"):
        tune_study(options(tmp_path, other, n_trials=1))
    with pytest.raises(UserError, match="require"):
        tune_study(options(tmp_path, require="cos<=0.5", n_trials=1))
    assert len(trials(tmp_path)) == 1
    tune_study(options(tmp_path, require="cos<=0.5", n_trials=1, force=True, select=False))  # a new requirement: --force
    assert len(trials(tmp_path)) == 2


def test_force_cannot_change_the_model_or_the_data(tmp_path):
    """The old trials measured the old model on the old data: their winner would be a stranger's."""
    mine = write_demo_model(str(tmp_path / "mine.onnx"), outliers=1)
    tune_study(options(tmp_path, mine, n_trials=1, select=False))
    other = write_demo_model(str(tmp_path / "other.onnx"), outliers=2)
    with pytest.raises(UserError, match=r"was made for another model .* --force cannot change it: use a new --study name"):
        tune_study(options(tmp_path, other, n_trials=1, force=True))
    with pytest.raises(UserError, match=r"validation data here differ .* new --study name for new data \(--force cannot"):
        tune_study(options(tmp_path, shapes=["x=4x64x256"], n_trials=1, force=True))
    write_demo_model(mine, outliers=0)  # the model file changed in place; the resume names no model
    with pytest.raises(UserError, match=r"changed since the study began \(model_hash differs\).*cannot change a study's model"):
        tune_study(TuneOptions.of(study="s", storage=f"sqlite:///{tmp_path}/s.db", n_trials=1, force=True))
    assert len(trials(tmp_path)) == 1


SMALL_SPACE = """
name: small
backend: onnxruntime
parameters:
  precision: {type: categorical, choices: [fp32, int8-dynamic], default: fp32}
  dyn_per_channel: {type: bool, default: false, when: {precision: [int8-dynamic]}}
"""


def test_repeated_config_is_reused_not_rebuilt(demo_path, tmp_path):
    # The grid fixes dyn_per_channel for fp32 too, where it is inactive: two grid points, one build.
    space = tmp_path / "small.yaml"
    space.write_text(SMALL_SPACE)
    result = tune_study(options(tmp_path, demo_path, space=str(space), sampler="grid", n_trials=6, select=False))
    done = result.study.trials
    assert len(done) == 5  # the baseline, then the 4 grid points; the grid then stops the study
    by_key = {}
    for t in done:
        by_key.setdefault(t.user_attrs["build_key"], []).append(t)
    assert len(by_key) == 3
    for group in by_key.values():
        built = [t for t in group if "reused_from" not in t.user_attrs]
        assert len(built) == 1 and "timing_window" in built[0].user_attrs
        for t in group[1:]:
            assert t.user_attrs["reused_from"] == built[0].number and "timing_window" not in t.user_attrs
            assert t.values == built[0].values and t.constraints == built[0].constraints


def test_failing_build_fails_only_its_trial(demo_path, tmp_path):
    space = independent_space(tmp_path, DEFAULT_SPACE_TEXT.replace("choices: [32, 64, 128], default: 128",
                                                                   "choices: [7, 128], default: 128"), "bad.yaml")
    result = tune_study(options(tmp_path, demo_path, space=space, n_trials=3, select=False,
                          enqueue=["precision=int4-weight,int4_block_size=7", "precision=int8-dynamic"]))
    states = [t.state for t in result.study.trials]
    assert states == [TrialState.COMPLETE, TrialState.FAIL, TrialState.COMPLETE]
    assert "block" in result.study.trials[1].user_attrs["fail_reason"].lower()


def test_infeasible_trials_never_win_and_nothing_feasible_says_so(demo_path, tmp_path, capsys):
    # snr_db of an identical output is -300 dB: below that, nothing can be feasible (other metrics' floor is 0,
    # and a limit below a floor is refused)
    result = tune_study(options(tmp_path, demo_path, require="snr_db<=-400", n_trials=2, enqueue=["precision=int8-dynamic"]))
    assert all(t.constraints["snr_db<=-400"] > 0 and not is_feasible(t) for t in result.study.trials)
    assert result.winner is None
    best = result.study.user_attrs["best_effort"]
    assert best["trial"] == 0  # fp32: the least violation
    url = f"sqlite:///{tmp_path}/s.db"
    assert main(["export", "--study", "s", "--storage", url, "--out", str(tmp_path / "x")]) == 2
    assert "--best-effort" in capsys.readouterr().err
    assert main(["export", "--study", "s", "--storage", url, "--out", str(tmp_path / "x"), "--best-effort"]) == 0
    report = json.loads((tmp_path / "x" / "report.json").read_text())
    assert report["kind"].startswith("best-effort") and report["meets_requirement"] is False
    assert os.path.isfile(tmp_path / "x" / "engine" / "model.onnx")


def test_strict_requirement_filters_the_winner(demo_path, tmp_path):
    result = tune_study(options(tmp_path, demo_path, require="cos<=1e-6", n_trials=2, enqueue=["precision=int8-dynamic"]))
    quantized = result.study.trials[1]
    assert quantized.constraints["cos<=1e-06"] > 0
    assert result.winner["trial"] != 1 and result.winner["config"]["precision"] != "int8-dynamic"


def test_cli_tune_status_select_export(demo_path, tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/s.db"
    common = ["--study", "s", "--storage", url]
    assert main(["tune", demo_path, *common, "--space", independent_space(tmp_path), "--shape", "x=2x64x256",
                 "--require", "cos<=0.005", "--n-trials", "2",
                 "--quiet", "--max-timing-s", "1", "--enqueue", "precision=int8-dynamic"]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "winner: trial" in out
    # the closing line: the winner over the space's only runtime's defaults (the baseline), timed side by side
    against = [line for line in out.splitlines() if line.startswith("winner against each runtime's defaults: ")]
    assert len(against) == 1 and re.fullmatch(
        r"winner against each runtime's defaults: \d+\.\d\dx ONNX Runtime's defaults( \(the winner is them\))? "
        r"\(timed side by side\)", against[0]), out
    assert re.search(r", computed as (int8 \+ )?fp32 \(ONNX Runtime's optimized graph, level ", out), out  # as run
    assert "finalists, timed side by side (median, p10-p90 of the runs, 95% CI of the median):" in out
    trial0 = [line for line in out.splitlines() if line.startswith("  trial 0 ")]
    assert trial0 and "baseline" in trial0[0]  # the baseline is always among them (it may also be the winner)
    notes = [line for line in captured.err.splitlines() if line.startswith("note: ")]
    no_data = ("note: no --data: accuracy is measured on synthetic inputs (x: standard normal), which says "
               "little about a real task; give real inputs with --data FILE.npz")
    assert notes.count(no_data) == 1 and len(set(notes)) == len(notes)  # each said once, at the start
    assert main(["select", *common, "--top-k", "1"]) == 0
    captured = capsys.readouterr()
    assert "finalists, timed side by side" in captured.out and captured.err.count("note: no --data") == 1
    assert main(["status", *common]) == 0
    status = capsys.readouterr().out
    assert "complete 2" in status and "baseline: trial 0" in status and "winner: trial" in status
    assert "baseline: trial 0, " in status and "precision fp32, computed as fp32 (ONNX Runtime's" in status
    assert "winner against each runtime's defaults: " in status and "x ONNX Runtime's defaults" in status
    assert main(["studies", "--storage", url]) == 0
    assert "s " in capsys.readouterr().out
    assert main(["export", *common, "--out", str(tmp_path / "w")]) == 0
    report = json.loads((tmp_path / "w" / "report.json").read_text())
    assert report["kind"] == "winner" and report["meets_requirement"] and report["rebuilt_matches_stored"]
    assert report["precision_as_run"]["inference"] == "f32" and report["precision_text"].startswith("precision ")
    assert list(report["vs_defaults"]) == ["onnxruntime"]
    assert report["vs_defaults"]["onnxruntime"] == pytest.approx(report["speedup_vs_baseline"])
    assert report["runtime_defaults"]["onnxruntime"]["trial"] == 0
    # ONNX Runtime's engine takes any shape the model does: the shapes are said, and no line about them
    assert report["shapes"] == {"x": [2, 64, 256]} and report["serves_only_these_shapes"] is None
    assert "serves only" not in capsys.readouterr().err


def test_without_a_requirement_tune_and_the_report_say_every_trial_is_feasible(demo_path, tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/s.db"
    assert main(["tune", demo_path, "--study", "s", "--storage", url, "--space", independent_space(tmp_path),
                 "--shape", "x=2x64x256", "--n-trials", "1", "--quiet", "--max-timing-s", "1", "--no-select"]) == 0
    err = capsys.readouterr().err
    assert err.count("note: no --require: every trial counts as feasible") == 1
    assert err.index("note: no --require") < err.index("trial 0")  # at the start, before the first trial
    assert main(["report", "--study", "s", "--storage", url, "--out", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "no --require: every trial counts as feasible" in page and "synthetic inputs (x: standard normal)" in page
