"""Crashes, hangs, kill -9, Ctrl-C, parallel workers and bad input, through the real `tuner` command
in subprocesses on real SQLite files."""
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time

import optuna
import psutil
import pytest
from optuna.trial import TrialState

from tuner.cli.main import main
from tuner.errors import UserError
from tuner.inputs.space import SPACES_DIR
from tuner.store.locks import device_lock
from tuner.store.storage import load_study

SMALL_SPACE = open(os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml")).read()
# The small space has 24 configs: once they are built every trial reuses one and ends in milliseconds, so a
# run of hundreds of trials could end between a test's seeing a running trial and its signal. With a
# knob of 64 values, a run that is to be killed keeps building.
ENDLESS_SPACE = SMALL_SPACE + "  inter_op_num_threads: {type: int, low: 1, high: 64, default: 1}\n"

# A user metric that misbehaves on its first call only (a marker file remembers), then measures cos.
METRIC = """\
import os, time
import numpy as np

def _first_call():
    marker = os.environ["TUNER_TEST_MARKER"]
    if os.path.exists(marker):
        return False
    open(marker, "w").close()
    return True

def crash(outputs, refs, inputs):
    if _first_call():
        os.abort()
    return 0.0

def hang(outputs, refs, inputs):
    if _first_call():
        time.sleep(600)
    return 0.0

def stall(outputs, refs, inputs):
    # the first trial measures; every later one says it is inside its accuracy check, then waits there
    if not _first_call():
        open(os.environ["TUNER_TEST_MARKER"] + ".stalled", "w").close()
        time.sleep(600)
    return 0.0
"""


# Put on the tuner's PYTHONPATH: the analysis ranks layers even where int8 reads no faster than fp32
# (tests/integration/test_sensitivity.py patches the same gate in-process).
RANK_ALWAYS = """\
import tuner.analysis.rankings as rankings
rankings.NOT_FASTER = float("inf")
"""


@pytest.fixture
def work(tmp_path, demo_path):
    (tmp_path / "small.yaml").write_text(SMALL_SPACE)
    (tmp_path / "endless.yaml").write_text(ENDLESS_SPACE)
    (tmp_path / "badmetric.py").write_text(METRIC)
    return tmp_path


def tuner_cmd(work, *args):
    return [sys.executable, "-m", "tuner.cli.main", *args]


def env_for(work):
    return dict(os.environ, PYTHONPATH=str(work), TUNER_TEST_MARKER=str(work / "marker"),
                TUNER_CACHE=str(work / "cache"))


def tune_args(demo_path, study, *extra, space="small.yaml"):
    return ["tune", demo_path, "--study", study, "--storage", f"sqlite:///{study}.db", "--space", space,
            "--shape", "x=2x64x256", "--max-timing-s", "0.5", "--quiet", "--seed", "0", *extra]


def run_tuner(work, *args, timeout=300):
    return subprocess.run(tuner_cmd(work, *args), cwd=work, env=env_for(work), capture_output=True, text=True,
                          timeout=timeout)


def load(work, study):
    # read-only, as `tuner status` does: a reader that created tables would race the tuner creating them
    return load_study(study, f"sqlite:///{work}/{study}.db", reading=True).trials


def by_state(trials):
    counts = {}
    for t in trials:
        counts[t.state] = counts.get(t.state, 0) + 1
    return counts


def test_abort_in_a_user_metric_fails_only_its_trial(work, demo_path):
    r = run_tuner(work, *tune_args(demo_path, "crash", "--n-trials", "3", "--no-select", "--require", "badmetric:crash<=1"))
    assert r.returncode == 0, r.stderr
    trials = load(work, "crash")
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE, TrialState.COMPLETE]
    assert "killed by signal 6 (SIGABRT) during accuracy check" in trials[0].user_attrs["fail_reason"]


def test_a_hang_is_ended_by_the_trial_timeout(work, demo_path):
    # The timeout covers a whole trial: start-up, two builds (candidate and baseline), the accuracy check and
    # the timing. 40 s leaves a loaded 2-core machine room for the trial that does not hang (about 5 s
    # quiet); the timing lock is this test session's own (conftest), so no other tuner holds it up.
    r = run_tuner(work, *tune_args(demo_path, "hang", "--n-trials", "2", "--no-select", "--trial-timeout", "40s",
                                   "--require", "badmetric:hang<=1"))
    assert r.returncode == 0, r.stderr
    trials = load(work, "hang")
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE]
    assert trials[0].user_attrs["fail_reason"] == "timed out after 40 s during accuracy check"


def _wait_for_running_trial(work, study, proc, min_complete, deadline_s=240):
    """Poll the SQLite file until a trial has been RUNNING for a while after `min_complete` completed
    ones (a reused config completes at once: that is not the middle of a trial)."""
    end = time.monotonic() + deadline_s
    seen: dict[int, float] = {}
    while time.monotonic() < end:
        if proc.poll() is not None:
            err = proc.communicate()[1] if proc.stderr else ""
            raise AssertionError(f"the tuner ended (exit {proc.returncode}) before it could be killed:\n{err}")
        if os.path.exists(work / f"{study}.db"):
            try:
                trials = load(work, study)
            except UserError:  # the file or the study is being created
                trials = []
            counts = by_state(trials)
            if counts.get(TrialState.COMPLETE, 0) >= min_complete:
                for t in trials:
                    if t.state == TrialState.RUNNING and time.monotonic() - seen.setdefault(t.number, time.monotonic()) > 0.5:
                        return  # well inside the trial: its child is building or timing
        time.sleep(0.1)
    proc.kill()  # a tuner left running would hold the timing lock and slow every later test
    proc.wait()
    raise AssertionError("no running trial to kill")


def test_kill_9_then_resume_loses_nothing(work, demo_path):
    killed_at = []
    completed_before = {}
    # once with one process, once with two workers (which must die with the tuner)
    for round_, (min_complete, jobs) in enumerate(((2, "1"), (4, "2"))):
        # a budget it cannot finish before the kill (ENDLESS_SPACE)
        args = tune_args(demo_path, "kill", "--n-trials", "500", "--no-select", "--jobs", jobs, space="endless.yaml")
        log = open(work / f"kill-{round_}.log", "w")
        proc = subprocess.Popen(tuner_cmd(work, *args), cwd=work, env=env_for(work), stdout=log, stderr=log)
        try:
            _wait_for_running_trial(work, "kill", proc, min_complete)
        except AssertionError:
            raise AssertionError((work / f"kill-{round_}.log").read_text()) from None
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        trials = load(work, "kill")
        time.sleep(1)  # orphaned workers would go on writing: give them the time to show it
        assert load(work, "kill") == trials or [t.state for t in load(work, "kill")] == [t.state for t in trials]
        running = [t.number for t in trials if t.state == TrialState.RUNNING]
        assert 1 <= len(running) <= int(jobs)
        killed_at += running
        completed_before.update({t.number: t.values for t in trials if t.state == TrialState.COMPLETE})

    r = run_tuner(work, "tune", "--study", "kill", "--storage", "sqlite:///kill.db", "--n-trials", "2", "--no-select",
                  "--quiet")
    assert r.returncode == 0, r.stderr
    trials = load(work, "kill")
    assert len({t.number for t in trials}) == len(trials)
    # No completed trial lost or changed, no trial left RUNNING or WAITING.
    assert {n: trials[n].values for n in completed_before} == completed_before
    assert all(trials[n].state == TrialState.COMPLETE for n in completed_before)
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    for n in killed_at:
        assert trials[n].state == TrialState.FAIL
        assert trials[n].user_attrs["fail_reason"] == "the tuning process died during this trial"
        retries = [t for t in trials if t.user_attrs.get("retry_of") == n]
        if "retry_of" in trials[n].user_attrs:  # a retry killed again: its config was tried once more already
            assert retries == [], retries
        else:  # (a trial killed before it chose its config has no params: its retry chooses afresh)
            assert len(retries) == 1 and (not trials[n].params or retries[0].params == trials[n].params)
    assert any("retry_of" not in trials[n].user_attrs for n in killed_at)  # round 0 killed a first attempt


def _measured(cache_dir) -> dict:
    """The analysis builds cached as they were measured (tuner.analysis.sensitivity._measure), all files together."""
    import json

    out = {}
    for path in cache_dir.glob("measured-*.json") if cache_dir.exists() else []:
        try:
            out.update(json.loads(path.read_text()))
        except ValueError:  # written atomically: never half a file, but be safe
            pass
    return out


def test_a_kill_during_the_analysis_is_resumed_by_the_documented_command(work, demo_path):
    """The study and its settings exist from the start, and the baseline runs before the analysis: after a
    SIGKILL in the middle of the per-layer analysis, `tuner tune --study NAME` (no model) resumes it, and no
    build measured before the kill is measured again (each keeps its exact figures)."""
    (work / "ranked.yaml").write_text(open(os.path.join(SPACES_DIR, "onnxruntime-cpu-sensitivity.yaml")).read())
    # The layers are ranked whatever int8's timing against fp32 (on an AVX2-only CPU under load the gate can
    # read int8 as no faster and rank nothing, leaving no analysis to kill): the tuner's processes import this
    # from the work directory, on their PYTHONPATH (env_for).
    (work / "sitecustomize.py").write_text(RANK_ALWAYS)
    args = ["tune", demo_path, "--study", "k", "--storage", "sqlite:///k.db", "--space", "ranked.yaml",
            "--shape", "x=2x64x256", "--max-timing-s", "0.3", "--quiet", "--no-select", "--n-trials", "2",
            "--require", "cos<=0.0001"]
    log = open(work / "analysis.log", "w")
    proc = subprocess.Popen(tuner_cmd(work, *args), cwd=work, env=env_for(work), stdout=log, stderr=log,
                            preexec_fn=_signals_as_in_a_terminal)
    cache_dir = work / "cache"
    deadline = time.monotonic() + 240
    while len(_measured(cache_dir)) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.kill()
    proc.wait()
    log.close()
    before = _measured(cache_dir)
    assert len(before) >= 3, (work / "analysis.log").read_text()
    study = load_study("k", f"sqlite:///{work}/k.db", reading=True)
    assert study.user_attrs["tuner_settings"]["rankings_for"] is None  # killed before the analysis ended
    assert [(t.number, t.state) for t in study.trials] == [(0, TrialState.COMPLETE)]  # the defaults ran first

    r = run_tuner(work, "tune", "--study", "k", "--storage", "sqlite:///k.db", "--n-trials", "2", "--no-select", "--quiet")
    assert r.returncode in (0, 4), r.stderr  # 4: nothing feasible under the tight bound is an outcome, not an error
    after = _measured(cache_dir)
    assert {k: after[k] for k in before} == before
    study = load_study("k", f"sqlite:///{work}/k.db", reading=True)
    assert study.user_attrs["tuner_settings"]["rankings"]["keep_float"]["order"]
    assert len(study.trials) == 3 and study.trials[1].user_attrs.get("enqueued") == "greedy"


def _alive(procs):
    """Those of `procs` still running (a zombie is dead: only its exit status is left to collect)."""
    out = []
    for p in {p.pid: p for p in procs}.values():
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def _in_group(pgid):
    """The processes of a process group, wherever they were reparented."""
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid:
                out.append(p)
        except (ProcessLookupError, psutil.Error):
            pass
    return out


def _describe(procs):
    lines = []
    for p in procs:
        try:
            lines.append(f"{p.pid} (parent {p.ppid()}, {p.status()}): {' '.join(p.cmdline())[:200]}")
        except psutil.Error:
            lines.append(f"{p.pid}: gone")
    return "\n".join(lines)


def _workers_and_trial_children(pid):
    """The spawned workers of the tuner at `pid`, and the trial children of their forkservers."""
    try:
        workers = [p for p in psutil.Process(pid).children() if "spawn_main" in " ".join(p.cmdline())]
        servers = [s for w in workers for s in w.children()]
        return workers, [c for s in servers for c in s.children()]
    except psutil.Error:  # one ended while it was looked at: look again
        return [], []


def test_kill_9_of_a_parallel_run_leaves_no_process_behind(work, demo_path):
    """Workers, their forkservers and their trials' children end with the tuner, even when it is killed
    by SIGKILL: none is left running (they would hold the timing lock and the cores). The workers' trials
    stall in their metric: children busy in a long phase, which no closed pipe would reach until the phase
    ends. (The first trial, the runtime's defaults, runs in the tuner itself before the workers start, and
    measures.)"""
    args = tune_args(demo_path, "orphans", "--n-trials", "500", "--no-select", "--jobs", "4", "--jobs-over-cores",
                     "--require", "badmetric:stall<=1", space="endless.yaml")
    log = open(work / "orphans.log", "w")
    # its own session: every descendant is in the process group whose id is the tuner's pid, wherever the
    # kill reparents it
    proc = subprocess.Popen(tuner_cmd(work, *args), cwd=work, env=env_for(work), stdout=log, stderr=log,
                            start_new_session=True)
    seen: list = []
    try:
        end = time.monotonic() + 240  # four workers loading ONNX Runtime on a loaded 2-core machine
        while True:
            assert proc.poll() is None, (work / "orphans.log").read_text()
            workers, trial_children = _workers_and_trial_children(proc.pid)
            if len(workers) >= 4 and trial_children and os.path.exists(f"{work / 'marker'}.stalled"):  # a stall began
                break
            assert time.monotonic() < end, f"no 4 workers with a trial stalled:\n{_describe(workers + trial_children)}"
            time.sleep(0.2)
        seen = psutil.Process(proc.pid).children(recursive=True)
        os.kill(proc.pid, signal.SIGKILL)  # the tuner alone, not its group
        proc.wait()
        killed = time.monotonic()
        while _alive(seen + _in_group(proc.pid)) and time.monotonic() - killed < 5:
            time.sleep(0.05)
        left = _alive(seen + _in_group(proc.pid))
        print(f"{len(seen)} descendants ({len(trial_children)} trial children) ended "
              f"{time.monotonic() - killed:.2f} s after the kill")
        assert not left, f"alive 5 s after the tuner was killed:\n{_describe(left)}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in _alive(seen + _in_group(proc.pid)):  # a failed test leaves nothing running
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        log.close()


def _signals_as_in_a_terminal() -> None:
    """SIGINT and SIGTERM at their defaults in the tuner: a test session started in the background by a
    non-interactive shell (`bash .ci/run &`) ignores SIGINT, every process it starts inherits that, and a
    Python started with SIGINT ignored never turns it into KeyboardInterrupt: Ctrl-C would not be tested."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_ctrl_c_fails_the_running_trial_and_exits_130(work, demo_path):
    # a budget it cannot finish before the signal (ENDLESS_SPACE)
    proc = subprocess.Popen(tuner_cmd(work, *tune_args(demo_path, "intr", *STALL)), cwd=work,
                            env=env_for(work), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_signals_as_in_a_terminal)
    _wait_for_stalled_trial(work, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err
    _the_signal_failed_the_running_trial(load(work, "intr"), "interrupted (Ctrl-C) during this trial")


# A trial provably running when the signal comes: the second trial's accuracy check stalls in its user metric
# (badmetric:stall) after saying so in a file; the first one completes.
STALL = ("--n-trials", "500", "--require", "badmetric:stall<=1")


def _wait_for_stalled_trial(work, proc, deadline_s=240):
    end = time.monotonic() + deadline_s
    while not os.path.exists(f"{work / 'marker'}.stalled"):
        if proc.poll() is not None:
            raise AssertionError(f"the tuner ended (exit {proc.returncode}) before its trial stalled:\n{proc.communicate()[1]}")
        if time.monotonic() > end:
            proc.kill()
            raise AssertionError("no trial stalled in its accuracy check")
        time.sleep(0.1)


def _the_signal_failed_the_running_trial(trials, reason):
    """No trial left RUNNING; the first completed, the second (in its accuracy check when the signal came)
    failed with the signal's reason, and nothing after it."""
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.FAIL], [(t.number, t.state) for t in trials]
    assert trials[1].user_attrs["fail_reason"] == reason


def test_sigterm_fails_the_running_trial_and_exits_143(work, demo_path):
    """SIGTERM, what Slurm, `timeout` and systemd send, ends a run as Ctrl-C does: no trial left RUNNING."""
    proc = subprocess.Popen(tuner_cmd(work, *tune_args(demo_path, "term", *STALL)),
                            cwd=work, preexec_fn=_signals_as_in_a_terminal,
                            env=env_for(work), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_stalled_trial(work, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "terminated (SIGTERM)" in err and "Traceback" not in err, err
    _the_signal_failed_the_running_trial(load(work, "term"), "terminated (SIGTERM) during this trial")


@pytest.mark.parametrize("jobs", [2, 4])
def test_parallel_workers_share_the_budget_and_never_time_at_once(work, demo_path, jobs):
    study = f"jobs{jobs}"
    r = run_tuner(work, *tune_args(demo_path, study, "--n-trials", "8", "--jobs", str(jobs), "--jobs-over-cores",
                                                 "--no-select"))
    assert r.returncode == 0, r.stderr
    assert f"{study}: 8 trials run" in r.stdout
    trials = load(work, study)
    assert len(trials) == 8 and sorted(t.number for t in trials) == list(range(8))
    assert by_state(trials).get(TrialState.COMPLETE, 0) + by_state(trials).get(TrialState.FAIL, 0) == 8
    assert [t.number for t in trials if t.user_attrs.get("baseline")] == [0]
    windows = sorted(t.user_attrs["timing_window"] for t in trials if "timing_window" in t.user_attrs)
    slow = [t for t in trials if (t.user_attrs.get("relative") or {}).get("stopped") == "slow run"]
    assert len(windows) + len(slow) >= 4  # the rest reused a config (not timed again); a slow run has no window
    for (_, end), (start, _) in zip(windows, windows[1:]):
        assert end <= start, f"two candidates were timed at once: {windows}"
    machines = {t.user_attrs["machine"]["cpu"] for t in trials if "machine" in t.user_attrs}
    assert len(machines) == 1


def _hold_lock_forever(path, ready):
    with device_lock(path):
        ready.set()
        time.sleep(600)


def _take_lock(path, got):
    with device_lock(path):
        got.set()


# ---------------------------------------------------------------- bad input


def test_a_study_name_used_for_another_model_is_refused(tmp_path, demo_path, capsys, monkeypatch):
    from tuner.cli.demo import write_demo_model

    monkeypatch.chdir(tmp_path)
    (tmp_path / "small.yaml").write_text(SMALL_SPACE)
    base = ["--study", "s", "--space", "small.yaml", "--shape", "x=2x64x256", "--max-timing-s", "0.3", "--quiet",
            "--no-select"]
    assert main(["tune", demo_path, *base, "--n-trials", "1"]) == 0
    other = write_demo_model(str(tmp_path / "other.onnx"), outliers=1)
    capsys.readouterr()
    assert main(["tune", other, *base, "--n-trials", "1"]) == 2
    err = capsys.readouterr().err
    assert "was made for another model" in err and "use a new --study name" in err
    assert len(optuna.load_study(study_name="s", storage="sqlite:///studies/s.db").trials) == 1


def test_a_killed_lock_holder_releases_the_timing_lock(tmp_path):
    path = str(tmp_path / "dev.lock")
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    holder = ctx.Process(target=_hold_lock_forever, args=(path, ready))
    holder.start()
    assert ready.wait(60)
    holder.kill()
    holder.join()
    got = ctx.Event()
    taker = ctx.Process(target=_take_lock, args=(path, got))
    taker.start()
    taker.join(30)
    assert got.is_set()
