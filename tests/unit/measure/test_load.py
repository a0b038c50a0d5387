"""The load of other processes, from counters the test sets: exact, whatever else the machine does."""
import pytest

from tuner.measure.load import BUSY_SHARE, CpuCounters, LoadMeter, wait_until_quiet

T0 = 100.0  # the fake clock's start


class Machine:
    """Fake counters: `others` cores' worth of CPU used by other processes and `mine` by this one, per second."""

    def __init__(self, others: float, mine: float = 1.0, cores: int = 2):
        self.t, self.busy, self.own = T0, 80.0, 30.0  # counters read since boot, not from zero
        self.others, self.mine, self.cores = others, mine, cores

    def advance(self, seconds: float) -> None:
        self.t += seconds
        self.busy += (self.others + self.mine) * seconds
        self.own += self.mine * seconds

    def counters(self) -> CpuCounters:
        return CpuCounters(busy=lambda: self.busy, own=lambda: self.own, clock=lambda: self.t, cores=self.cores)


def test_own_cpu_time_is_not_load_and_others_are():
    m = Machine(others=0.0, mine=2.0)
    with LoadMeter(m.counters()) as meter:
        m.advance(3.0)
    assert meter.load.to_dict() == {"other_cores": 0.0, "share": 0.0, "busy": False}
    m = Machine(others=1.0)
    with LoadMeter(m.counters()) as meter:
        m.advance(3.0)
    assert meter.load.to_dict() == {"other_cores": 1.0, "share": 0.5, "busy": True}


def test_busy_is_a_share_above_the_threshold():
    just_under = Machine(others=BUSY_SHARE * 2 - 0.02)
    with LoadMeter(just_under.counters()) as meter:
        just_under.advance(1.0)
    assert not meter.load.busy
    just_over = Machine(others=BUSY_SHARE * 2 + 0.02)
    with LoadMeter(just_over.counters()) as meter:
        just_over.advance(1.0)
    assert meter.load.busy


def test_wait_until_quiet_polls_until_the_others_stop():
    m = Machine(others=1.5, mine=0.0)
    said = []

    def sleep(seconds):
        m.advance(seconds)
        if m.t - T0 >= 20:  # the other work ends 20 s in
            m.others = 0.0

    load = wait_until_quiet(said.append, poll_s=5.0, counters=m.counters(), sleep=sleep)
    assert not load.busy and m.t - T0 == pytest.approx(25.0)  # 1 s samples and 5 s polls until the first quiet sample
    assert said[0] == "waiting for a quiet machine (others use 1.5 cores)" and len(said) == 4


def test_wait_until_quiet_gives_up_after_its_limit():
    m = Machine(others=2.0, mine=0.0)
    load = wait_until_quiet(lambda msg: None, max_wait_s=30.0, poll_s=5.0, counters=m.counters(), sleep=m.advance)
    assert load.busy and 30.0 <= m.t - T0 <= 36.0


def test_a_window_shorter_than_the_counters_tick_reads_no_load():
    m = Machine(others=0.0)
    with LoadMeter(m.counters()) as meter:
        m.busy += 0.01  # one 10 ms tick of another process over 2 us of wall: 5000 "cores" if divided
        m.advance(2e-6)
    assert meter.load.to_dict() == {"other_cores": 0.0, "share": 0.0, "busy": False}
