"""Exact resume (issue 31): a study stopped and resumed proposes, trial by trial, the configs of a study run
straight through, given the same results. The tuner's own study code on a real SQLite study: create_or_resume
(its sampler from make_sampler, its seed stored), recover_stale_trials, the baseline enqueued, and the
Objective with the tuner's suggestion code (normalize over onnxruntime-cpu.yaml, per-layer booleans
included) and its failure handling; only the evaluator is a fast deterministic stand-in for building and
timing. The stopped study runs as three processes: one stopped by Ctrl-C at its 15th trial, one killed by
SIGKILL at its 27th, one that finishes the 40. The grid sampler's space keeps four of its parameters
(GRID_PARAMS): the whole space's grid has 141,557,760 points, which Optuna's GridSampler lists and shuffles
in each process. Of its 32 points (32 configs: none inactive) trials 1-31 take points 1-31 (trial 0, the
baseline, is enqueued), the stop and the kill among them; trial 32 draws point 0, the one left unvisited,
and the trials after it draw points again (their configs' results reused).

The last test runs the real `tuner tune` end to end instead (the run lock, the claims, the trial loop, the
trial child and the engine processes), stopped by real signals, over a backend whose results are fixed by the
config (tests/fixtures/clockwork_backend)."""
from __future__ import annotations

import hashlib
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from types import SimpleNamespace

import optuna
import psutil
import pytest

from tuner.errors import TrialFailure
from tuner.inputs.space import SPACES_DIR, load_space
from tuner.measure.requirement import Requirement
from tuner.run.tune import recover_stale_trials
from tuner.search.choices import Timing
from tuner.search.enqueue import enqueue_initial
from tuner.search.objective import Objective
from tuner.search.record import FAIL_REASON, RETRY_OF, TrialRecord
from tuner.search.samplers import grid_space
from tuner.search.seeding import is_lost
from tuner.search.settings import StudySettings
from tuner.search.study import StudyContext, create_or_resume, load_existing, stored_settings
from tuner.store.storage import open_storage

N_TRIALS = 40
STOPS = {15: "ctrl-c", 27: "sigkill"}
REQUIRE = "cos<=0.01"
GRAPH = [("block0/attn/MatMul", "MatMul"), ("block1/ffn/MatMul", "MatMul"), ("head/Gemm", "Gemm")]
GRID_PARAMS = ("graph_optimization_level", "execution_mode", "intra_op_spinning", "disable_GeluFusion")
MACHINE = {"cpu": "test", "cores": 2, "versions": {"onnxruntime": "test"}}


def problem(sampler: str):
    """What the objective reads of a problem: the space (for the grid sampler, GRID_PARAMS of it), the model's
    nodes, the requirement."""
    space = load_space(os.path.join(SPACES_DIR, "onnxruntime-cpu.yaml"))
    for p in space.params if sampler == "grid" else []:
        if p.name not in GRID_PARAMS:
            space = space.with_param(p.name, None)
    return SimpleNamespace(space=space, graph_nodes=GRAPH, requirement=Requirement.parse(REQUIRE))


def effect(key: str, value) -> float:
    return int(hashlib.sha256(f"{key}={value}".encode()).hexdigest()[:6], 16) / 0xFFFFFF


class Evaluator:
    """Builds nothing: a latency and an error from the config. fp16 without a block list "fails to build"
    (a deterministic failure: the route is learnt, and later trials on it are pruned). stop_at: when the study
    has this many trials behind it (a lost trial not counted), stop during the build as `how` says."""

    def __init__(self, study: optuna.Study, stop_at: int | None = None, how: str | None = None):
        self.study, self.stop_at, self.how = study, stop_at, how
        self.lock_waits = SimpleNamespace(take=lambda: 0.0)  # tuner.execute.jobs.Evaluator's: no wait for a timing lock here

    def measure(self, config: dict, out_dir: str, band=None, give_up_above=None) -> TrialRecord:
        behind = [t for t in self.study.get_trials(deepcopy=False) if t.state.is_finished() and not is_lost(t)]
        if self.stop_at is not None and len(behind) >= self.stop_at:
            if self.how == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise KeyboardInterrupt
        if config.get("precision") == "fp16" and config.get("fp16_block_list") == "none":
            raise TrialFailure("fp16 build failed", kind="error", phase="build")
        latency = 10.0 - sum(effect(k, v) for k, v in sorted(config.items())) / 4
        error = {"fp32": 0.0, "fp16": 0.002}.get(config.get("precision"), 0.02) * (1 - len(config.get("keep_float", [])) / 4)
        metrics = {"cos": error}
        violations = Requirement.parse(REQUIRE).violations(metrics)
        return TrialRecord(config, {"median_ms": latency}, metrics, {}, violations, all(v <= 0 for v in violations.values()),
                           build_s=0.0, engine_bytes=0, backend="test", timing="alone")


def run_process(url: str, sampler: str, seed: int | None, stop_at: int | None, how: str | None) -> None:
    """What a `tuner tune --study s --n-trials ...` process does with the study, its evaluator stood in for."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    prob = problem(sampler)
    storage = open_storage(url)  # as tune opens it: WAL, synchronous=NORMAL
    study = load_existing("s", storage)
    settings = stored_settings(study) or StudySettings.from_attrs({"sampler": sampler, "seed": seed, "require": REQUIRE})
    settings = replace(settings, machine=MACHINE, timing=Timing.ALONE, backend="onnxruntime")
    study, settings = create_or_resume("s", storage, study, settings, prob)
    ctx = StudyContext(study, settings, prob, url)
    recover_stale_trials(study)
    enqueue_initial(ctx, [])
    engines = os.path.join(os.path.dirname(url.removeprefix("sqlite:///")), "engines")
    objective = Objective(ctx, Evaluator(study, stop_at, how), engines_dir=engines, trial_attrs={"worker": "w1"})
    while sum(1 for t in study.get_trials(deepcopy=False) if not is_lost(t)) < N_TRIALS:
        study.optimize(objective, n_trials=1, catch=(TrialFailure,))


def in_a_process(url: str, sampler: str, seed: int | None, stop_at: int | None = None, how: str | None = None) -> int:
    """run_process in a process of its own; its exit status: 0, 130 (stopped by Ctrl-C) or -9 (SIGKILL)."""
    proc = subprocess.run([sys.executable, __file__, url, sampler, str(seed), str(stop_at), str(how)],
                          capture_output=True, text=True, timeout=300)
    expected = {None: 0, "ctrl-c": 130, "sigkill": -signal.SIGKILL}[how]
    assert proc.returncode == expected, proc.stderr[-3000:]
    return proc.returncode


def history(url: str) -> list[tuple]:
    """Trial by trial (lost trials left out; a retry stands in their place): what was proposed and its result."""
    trials = optuna.load_study(study_name="s", storage=url).trials
    return [(t.params, t.state.name, t.values, t.user_attrs.get("config")) for t in trials if not is_lost(t)]


@pytest.mark.parametrize("sampler, seed", [("tpe", None), ("random", 7), ("nsga2", 7), ("grid", 7)])
def test_a_stopped_and_resumed_study_proposes_what_a_straight_run_does(tmp_path, sampler, seed):
    stopped = f"sqlite:///{tmp_path}/stopped.db"
    # stopped by Ctrl-C during its 15th trial, then killed by SIGKILL during its 27th, then run to the end
    for stop_at, how in STOPS.items():
        in_a_process(stopped, sampler, seed, stop_at, how)
    in_a_process(stopped, sampler, seed)
    study = optuna.load_study(study_name="s", storage=stopped)
    stored_seed = study.user_attrs["tuner_settings"]["seed"]
    assert stored_seed is not None and (seed is None or stored_seed == seed)  # drawn once at creation when not given
    assert study.user_attrs["tuner_settings"]["sampler_options"]["seeded"] == "per trial"
    lost = [t for t in study.trials if is_lost(t)]
    assert [t.user_attrs[FAIL_REASON] for t in lost] == ["interrupted (Ctrl-C) during this trial",
                                                         "the tuning process died during this trial"]
    retry = next(t for t in study.trials if t.user_attrs.get(RETRY_OF) == lost[1].number)  # SIGKILL: its config queued again
    assert retry.params == lost[1].params
    # Ctrl-C: the config it stopped is not queued again, but the next trial takes its slot and proposes it anew
    assert study.trials[lost[0].number + 1].params == lost[0].params

    straight = f"sqlite:///{tmp_path}/straight.db"
    in_a_process(straight, sampler, stored_seed)
    got, want = history(stopped), history(straight)
    assert len(got) == len(want) == N_TRIALS
    for number, (a, b) in enumerate(zip(got, want)):
        assert a == b, f"trial {number} differs"
    assert len({str(p) for p, _, _, _ in want}) > N_TRIALS // 2  # a search, not one config over and over
    if sampler == "grid":  # every point once (the baseline, trial 0, is one of them) before any again
        points = math.prod(len(v) for v in grid_space(problem(sampler).space).values())
        assert points < N_TRIALS and len({str(p) for p, _, _, _ in want[:points + 1]}) == points
    assert {t.user_attrs.get("worker") for t in study.trials if not is_lost(t)} == {"w1"}  # what each trial records



TUNE_TRIALS = 30
TUNE_STOPS = {12: signal.SIGINT, 21: signal.SIGKILL}  # the build numbered so, across the stopped study's runs


def _tune(tmp_path, env: dict, db: str, max_trials: int, stall_at: int | None = None) -> subprocess.Popen:
    """`tuner tune` over the clockwork backend (results fixed by the config: tests/fixtures/clockwork_backend)."""
    import fixture_backends

    args = fixture_backends.clockwork_tune_args(tmp_path, db, max_trials)
    folder = tmp_path / f"{db}.builds"
    folder.mkdir(exist_ok=True)
    env = env | {"CLOCKWORK_DIR": str(folder), "TUNER_CACHE": str(tmp_path / "cache")}
    env.pop("CLOCKWORK_STALL_AT", None)
    if stall_at is not None:
        env["CLOCKWORK_STALL_AT"] = str(stall_at)
    return subprocess.Popen([sys.executable, "-m", "tuner.cli.main", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _stopped_at(proc: subprocess.Popen, marker, sig: int) -> None:
    """Wait until the stalled build's marker exists (its trial is running), then send `sig` to the tuner alone."""
    end = time.monotonic() + 300
    while not marker.exists():
        assert proc.poll() is None, f"the tuner ended (exit {proc.returncode}) before its stall:\n{proc.communicate()[1]}"
        assert time.monotonic() < end, "no stall within 300 s"
        time.sleep(0.1)
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == {signal.SIGINT: 130, signal.SIGKILL: -signal.SIGKILL}[sig], err[-3000:]
    for p in psutil.Process().children(recursive=True) if sig == signal.SIGKILL else []:
        p.kill()  # nothing of this run may time beside the next (the kill -9 test proves they end by themselves)


def test_tune_stopped_by_ctrl_c_and_kill_9_then_resumed_proposes_what_a_straight_run_does(tmp_path):
    """The real `tuner tune`, end to end: a study stopped by a real SIGINT and a real SIGKILL, each while a trial
    builds (a marker the build writes), then resumed by the same command, proposes trial by trial what a study
    run straight through proposes. The clockwork backend makes each config's results the same in every run."""
    import fixture_backends  # tests/ is on the path under pytest, not when this file runs as a script

    env = fixture_backends.clockwork_study(tmp_path)
    for stall_at, sig in TUNE_STOPS.items():
        _stopped_at(_tune(tmp_path, env, "stopped.db", TUNE_TRIALS + 1, stall_at),
                    tmp_path / "stopped.db.builds" / f"stalled-{stall_at}", sig)
    # the Ctrl-C'd trial counts in the study-wide budget (it ran); the killed one is retried in its place
    finish = _tune(tmp_path, env, "stopped.db", TUNE_TRIALS + 1)
    straight = _tune(tmp_path, env, "straight.db", TUNE_TRIALS)
    for proc in (finish, straight):
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'stopped.db'}")
    lost = [t for t in study.trials if is_lost(t)]
    assert [t.user_attrs[FAIL_REASON] for t in lost] == ["interrupted (Ctrl-C) during this trial",
                                                         "the tuning process died during this trial"]
    got, want = history(f"sqlite:///{tmp_path / 'stopped.db'}"), history(f"sqlite:///{tmp_path / 'straight.db'}")
    assert len(got) == len(want) == TUNE_TRIALS
    for number, (a, b) in enumerate(zip(got, want)):
        assert a == b, f"trial {number} differs"
    assert len({str(p) for p, _, _, _ in want}) > TUNE_TRIALS // 2  # a search, not one config over and over
    assert {state for _, state, _, _ in want} == {"COMPLETE"}


if __name__ == "__main__":
    url, name, seed, stop_at, how = sys.argv[1:]
    try:
        run_process(url, name, None if seed == "None" else int(seed), None if stop_at == "None" else int(stop_at),
                    None if how == "None" else how)
    except KeyboardInterrupt:
        sys.exit(130)  # as a shell reports a process ended by Ctrl-C
