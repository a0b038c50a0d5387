"""--require (tuner.measure.requirement): what is refused, and several bounds at once."""
import pytest

from tuner.errors import UserError
from tuner.measure.requirement import Requirement


@pytest.mark.parametrize("text, message", [
    ("cos<0.1", "requirement 'cos<0.1' does not parse; write METRIC<=LIMIT"),
    ("nosuch<=1", "requirement 'nosuch<=1': unknown metric 'nosuch'; known: cos,"),
    ("cos<=abc", "requirement 'cos<=abc' does not parse"),
    ("cos<=1e999", "requirement 'cos<=1e999': the limit is not a finite number"),
    ("module_without_fn<=1", "requirement 'module_without_fn<=1': unknown metric 'module_without_fn'"),
    ("os:no_such_fn<=1", "metric 'os:no_such_fn': not a function defined in os's source"),  # read, not imported
    ("cos<=-0.1", "requirement 'cos<=-0.1': cos is an error of at least 0 (0 is identical)"),
])
def test_bad_requirement_refused(text, message):
    with pytest.raises(UserError) as e:
        Requirement.parse(text)
    assert str(e.value).startswith(message), str(e.value)


def test_requirement_parses_several():
    r = Requirement.parse("cos<=0.005,rel_l2<=0.01")
    assert [b.metric for b in r.bounds] == ["cos", "rel_l2"]
    assert r.holds({"cos": 0.001, "rel_l2": 0.001}) and not r.holds({"cos": 0.01, "rel_l2": 0.001})


def test_bounds_come_from_each_item_of_a_list_and_from_and():
    r = Requirement.parse(["cos<=0.005", "rel_l2<=0.01 and linf<=1", "snr_db<=-30; cos<=0"])
    assert str(r) == "cos<=0.005,rel_l2<=0.01,linf<=1,snr_db<=-30,cos<=0"  # a limit of 0 is identical outputs


def test_violations_are_value_minus_limit_and_the_limit_itself_holds():
    r = Requirement.parse("cos<=0.005, snr_db<=-40")
    assert str(r) == "cos<=0.005,snr_db<=-40" and r.primary_metric == "cos"
    assert r.violations({"cos": 0.007, "snr_db": -45.0}) == pytest.approx({"cos<=0.005": 0.002, "snr_db<=-40": -5.0})
    assert r.holds({"cos": 0.005, "snr_db": -40.0})  # at the limit: feasible (Optuna's value <= 0)
    assert not r.holds({"cos": 0.0050001, "snr_db": -41.0})
    assert not r.holds({"cos": 0.001, "snr_db": -39.9})


def test_a_metric_the_run_did_not_give_violates_its_bound():
    assert Requirement.parse("cos<=0.01").violations({}) == {"cos<=0.01": 1e30}
    assert Requirement.parse("cos<=0.01").violations({"cos": float("nan")}) == {"cos<=0.01": 1e30}  # not a figure
