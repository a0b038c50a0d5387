"""The baseline band: exact figures from a given history."""
import pytest

from tuner.measure.guard import MIN_WINDOWS, BaselineBand, guard_record


def test_no_band_before_enough_windows():
    assert BaselineBand.from_history([124.0] * (MIN_WINDOWS - 1)) is None


def test_a_quiet_history_gets_the_minimum_band_and_a_3x_window_is_disturbed():
    band = BaselineBand.from_history([124.0, 126.0, 122.0, 125.0])
    assert band.median_ms == pytest.approx(124.5) and band.windows == 4
    assert (band.low_ms, band.high_ms) == pytest.approx((124.5 * 0.75, 124.5 * 1.25))
    assert band.holds(150.0) and band.holds(100.0) and not band.holds(160.0)
    assert band.holds(40.0)  # faster than the history: a quieter machine, not a disturbed window
    assert not band.holds(382.0)  # the window: a burner on one core, two-thread baseline
    assert guard_record(band, 382.0, 2) == {"band": band.to_dict(), "window_ms": 382.0, "disturbed": True, "retimed": 2}
    assert guard_record(band, 125.0, 0)["disturbed"] is False
    assert guard_record(None, 382.0, 0) is None


def test_a_noisy_history_widens_the_band_by_its_spread():
    history = [100.0, 80.0, 120.0, 100.0, 100.0]  # two outliers: the MAD is 0, the band the minimum
    assert BaselineBand.from_history(history).high_ms == pytest.approx(125.0)
    wide = [100.0, 80.0, 120.0, 90.0, 110.0]  # MAD 10: 4 x 1.4826 x 10 = 59.3 > 25
    band = BaselineBand.from_history(wide)
    assert (band.low_ms, band.high_ms) == pytest.approx((100 - 59.304, 100 + 59.304))


def test_the_band_round_trips_through_a_dict():
    band = BaselineBand.from_history([10.0, 11.0, 12.0])
    assert BaselineBand.from_dict(band.to_dict()) == band and BaselineBand.from_dict(None) is None


def test_a_window_at_the_top_of_the_band_holds():
    band = BaselineBand.from_history([10.0] * MIN_WINDOWS)
    assert band.holds(band.high_ms) and not band.holds(band.high_ms * 1.0001)
