"""The device's timing lock as every timing takes it (tuner.store.locks.timing_lock): the holder says which
process, what it times and for which study, and one that must wait reports the phase that names it."""
import os
import threading

from tuner.errors import JobPhase
from tuner.store.locks import TimingLockWaits, default_lock_path, timing_lock


def _wait_for(device, on_phase, study, what):
    """Take the lock in a thread while this one holds it; return once the waiter has reported its wait (it
    then blocks until the lock is free), however slowly a busy machine runs it."""
    reported = threading.Event()

    def told(phase):
        on_phase(phase)
        reported.set()

    hook = None if on_phase is None else told  # None: nothing is reported, so nothing to wait for
    waiter = threading.Thread(target=lambda: timing_lock(device, hook, study, what).__enter__(), daemon=True)
    waiter.start()
    assert hook is None or reported.wait(60), "the waiter never reported its wait"
    return waiter


def test_the_holder_says_what_holds_the_lock_and_for_which_study(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNER_LOCK_DIR", str(tmp_path))
    with timing_lock("cpu", None, "bert", "selection"):
        assert open(default_lock_path("cpu")).read() == f"PID {os.getpid()}, selection of study bert"
    with timing_lock("cpu", None, None, "verify"):  # no study (tuner verify): still says what holds it
        assert open(default_lock_path("cpu")).read() == f"PID {os.getpid()}, verify"
    with timing_lock("cpu", None, "bert"):
        assert open(default_lock_path("cpu")).read() == f"PID {os.getpid()}, a trial of study bert"


def test_a_wait_is_reported_as_the_phase_timing_lock_waits_reads(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNER_LOCK_DIR", str(tmp_path))
    phases, said = [], []
    waits = TimingLockWaits("mine", say=said.append)

    def on_phase(phase):
        phases.append(phase)
        waits.on_phase(phase)

    with timing_lock("cpu", None, "theirs", "profile"):
        waiter = _wait_for("cpu", on_phase, "mine", "verify")
        assert phases == [f"{JobPhase.WAITING_FOR_LOCK}, held by PID {os.getpid()}, profile of study theirs"]
    waiter.join(10)
    assert len(said) == 1 and "profile of study theirs" in said[0]
    with timing_lock("gpu", None, "mine", "selection"):  # the study's own selection: its pace, no note
        waiter = _wait_for("gpu", on_phase, "mine", "a trial")
        assert phases[-1] == f"{JobPhase.WAITING_FOR_LOCK}, held by PID {os.getpid()}, selection of study mine"
    waiter.join(10)
    assert len(said) == 1
    with timing_lock("npu", None, "theirs"):  # no on_phase: the wait is not reported, the holder still written
        waiter = _wait_for("npu", None, "mine", "verify")
    waiter.join(10)
    assert open(default_lock_path("npu")).read() == f"PID {os.getpid()}, verify of study mine"
