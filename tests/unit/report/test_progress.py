"""The trial lines' elapsed time and ETA (tuner/report/progress.py), on a clock the test sets."""
from clocks import FakeClock

from tuner.report.progress import TrialProgress


def test_the_eta_is_the_mean_trial_time_times_the_trials_left():
    clock = FakeClock()
    progress = TrialProgress(10, None, live=False, quiet=True, clock=clock)
    clock.t = 40.0
    progress.done = 4  # 10 s a trial, 6 left
    assert progress._eta() == "1m00s"


def test_with_a_timeout_and_no_count_the_eta_is_the_time_left():
    clock = FakeClock()
    progress = TrialProgress(None, 300.0, live=False, quiet=True, clock=clock)
    clock.t = 120.0
    assert progress._eta() == "3m00s"


def test_the_eta_leaves_out_the_waits_for_another_studys_timing():
    clock = FakeClock()
    progress = TrialProgress(10, None, live=False, quiet=True, clock=clock, jobs=2)
    clock.t = 140.0
    progress.done, progress.waited = 4, 200.0  # two workers waited 100 s each, together: 40 s of trials
    assert progress._eta() == "1m00s"


def test_a_lock_held_by_another_study_is_said_once_and_its_wait_counted():
    from tuner.errors import JobPhase
    from tuner.store.locks import TimingLockWaits

    clock, said = FakeClock(), []
    waits = TimingLockWaits("mine", clock=clock, say=said.append)
    other = f"{JobPhase.WAITING_FOR_LOCK}, held by PID 7, a trial of study theirs"
    for _ in range(2):  # two trials in a row wait for the same holder: one note
        waits.on_phase(JobPhase.WAITING_FOR_LOCK)
        waits.on_phase(other)
        clock.t += 30.0
        waits.on_phase("timing")
    assert len(said) == 1 and "PID 7, a trial of study theirs" in said[0] and "mine" in said[0]
    waits.on_phase(f"{JobPhase.WAITING_FOR_LOCK}, held by PID 8, a trial of study mine")  # its own worker: its pace
    clock.t += 50.0
    waits.on_phase("timing")
    assert waits.take() == 60.0 and waits.take() == 0.0 and len(said) == 1


def test_the_holder_of_the_timing_lock_is_named_to_whoever_waits(tmp_path):
    import threading

    from tuner.store.locks import device_lock

    path, heard = str(tmp_path / "dev.lock"), []
    with device_lock(path, "PID 1, a trial of study a"):
        told = threading.Event()
        waiter = threading.Thread(target=lambda: device_lock(path, "PID 2", lambda who: heard.append(who) or told.set())
                                  .__enter__())
        waiter.start()
        assert told.wait(60)  # however slowly a busy machine runs the waiter
        assert heard == ["PID 1, a trial of study a"]
    waiter.join(10)
    assert open(path).read() == "PID 2"


def test_a_trial_line_fits_a_terminal_and_says_the_speedup(tmp_path, capsys):
    import optuna

    study = optuna.create_study()
    base = optuna.trial.create_trial(value=1.0, user_attrs={"baseline": True, "latency": {"median_ms": 13.97},
                                                             "relative": {"ratio": 1.0}})
    fast = optuna.trial.create_trial(value=0.543, user_attrs={"latency": {"median_ms": 7.6}, "relative": {"ratio": 0.5}})
    failed = optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL,
                                       user_attrs={"fail_reason": "RuntimeError: " + "a very long reason " * 20})
    for t in (base, fast, failed):
        study.add_trial(t)
    log = tmp_path / "s-trials.log"
    progress = TrialProgress(3, None, live=False, quiet=True, log_path=str(log))
    for t in study.trials:
        progress(study, t)
    lines = capsys.readouterr().err.splitlines()
    assert all(len(line) <= 119 for line in lines)
    assert "trial 0 (1/3) baseline 13.97 ms, feasible | best 2.00x #1" in lines[0]  # the study holds all three
    assert "trial 1 (2/3) 2.00x 7.60 ms, feasible | best 2.00x #1" in lines[1]
    assert lines[2].endswith("...") and (" a very long reason" * 20) in log.read_text()


def test_an_analysis_logs_one_line_per_stage_not_per_step():
    from tuner.report.progress import progress_printer

    said = []
    show = progress_printer(quiet=False, log_lines=True, terminal=False, say=said.append)
    for i in range(32):
        show(f"sensitivity {i + 1}/32: block{i % 4}/attn")
    for k in range(3):
        show(f"greedy: {k} most sensitive in float")
    show("groups: sensitivity 1/4: block0")
    assert said == ["sensitivity 1/32: block0/attn", "greedy: 0 most sensitive in float", "groups: sensitivity 1/4: block0"]
    progress_printer(quiet=True, log_lines=True, terminal=False, say=said.append)("sensitivity 1/32: x")
    assert len(said) == 3  # quiet: nothing


def test_a_baseline_that_is_the_best_so_far_is_called_the_baseline():
    import optuna

    study = optuna.create_study()
    study.add_trial(optuna.trial.create_trial(value=1.0, user_attrs={"baseline": True, "latency": {"median_ms": 13.97},
                                                                      "relative": {"ratio": 1.07}}))
    assert TrialProgress(3, None, live=False, quiet=True).summary(study).startswith("best: the baseline #0 |")


def test_a_text_too_long_is_cut_to_the_width_with_three_dots():
    from tuner.report.progress import shorten

    assert shorten("x" * 10, 10) == "x" * 10  # fits: as is
    assert shorten("abcdefghijk", 10) == "abcdefg..." and len(shorten("y" * 500, 119)) == 119
    assert shorten("", 5) == ""


def test_the_study_is_read_for_the_line_at_most_every_few_seconds_and_each_finished_trial_counts():
    import optuna

    from tuner.report.progress import READ_EVERY_S

    clock, reads = FakeClock(), []
    study = optuna.create_study()
    read = study.get_trials
    study.get_trials = lambda **kw: reads.append(1) or read(**kw)
    progress = TrialProgress(None, None, live=False, quiet=True, clock=clock)
    lines = []
    for seconds, value in [(0.0, 1.0), (0.5, 0.5), (1.0, 2.0), (READ_EVERY_S, 0.25)]:
        clock.t = seconds
        trial = study.ask()
        trial.set_user_attr("latency", {"median_ms": value})
        progress(study, study.tell(trial, value))
        lines.append(progress.summary(study, progress._read))
    assert len(reads) == 2  # the first line and the one READ_EVERY_S later
    assert [line.split(" | ")[1] for line in lines] == [f"{n} feasible, 0 infeasible, 0 failed" for n in (1, 2, 3, 4)]
    assert [line.split(" | ")[0].split("#")[1] for line in lines] == ["0", "1", "1", "3"]  # the best trial
