"""tuner.stopping: where a Ctrl-C or SIGTERM lands. The handler is called as the signal module would call it."""
import signal

import pytest

from tuner.errors import StopGate, Terminated


def test_outside_a_deferred_block_a_signal_acts_at_once():
    gate = StopGate()
    with pytest.raises(Terminated):
        gate.handle(signal.SIGTERM, None)
    with pytest.raises(KeyboardInterrupt) as exc:
        gate.handle(signal.SIGINT, None)
    assert type(exc.value) is KeyboardInterrupt


def test_inside_a_deferred_block_it_waits_for_the_outermost_end():
    gate, reached = StopGate(), []
    with pytest.raises(Terminated):
        with gate.deferred():
            with gate.deferred():
                gate.handle(signal.SIGTERM, None)  # returns: the write goes on
                reached.append("inner write")
            reached.append("after the inner block")  # still inside the outer one
        reached.append("never")
    assert reached == ["inner write", "after the inner block"] and gate.pending is None and gate.depth == 0


def test_the_first_signal_decides():
    gate = StopGate()
    with pytest.raises(KeyboardInterrupt) as exc:
        with gate.deferred():
            gate.handle(signal.SIGINT, None)
            gate.handle(signal.SIGTERM, None)
    assert type(exc.value) is KeyboardInterrupt


def test_an_opened_block_raises_a_waiting_signal_at_its_start_and_a_new_one_at_once():
    gate, reached = StopGate(), []
    with gate.deferred():
        gate.handle(signal.SIGINT, None)  # in Optuna's ask
        with pytest.raises(KeyboardInterrupt):
            with gate.opened():  # the objective
                reached.append("never")
        assert gate.depth == 1 and gate.pending is None
        with pytest.raises(Terminated):
            with gate.opened():
                gate.handle(signal.SIGTERM, None)  # during the build: at once
                reached.append("never")
        assert gate.depth == 1
    assert reached == []


def test_a_deferred_block_in_an_opened_one_raises_at_its_own_end():
    gate, reached = StopGate(), []
    with gate.deferred():
        with pytest.raises(Terminated):
            with gate.opened():
                with gate.deferred():  # the trial's record written inside the objective
                    gate.handle(signal.SIGTERM, None)
                    reached.append("record written")
                reached.append("never")
    assert reached == ["record written"]


def test_a_block_left_by_an_exception_keeps_the_signal_for_the_next_safe_point():
    gate = StopGate()
    with pytest.raises(ValueError):
        with gate.deferred():
            gate.handle(signal.SIGINT, None)
            raise ValueError("the write failed")
    assert gate.depth == 0 and isinstance(gate.pending, KeyboardInterrupt)
    with pytest.raises(KeyboardInterrupt):
        gate.safe_point()
    gate.safe_point()  # raised once
