"""--require (tuner.measure.requirement): what is refused, and several bounds at once."""
import pytest

from tuner.errors import UserError
from tuner.measure.requirement import Requirement


@pytest.mark.parametrize("text", ["cos<0.1", "nosuch<=1", "cos<=abc", "module_without_fn<=1"])
def test_bad_requirement_refused(text):
    with pytest.raises(UserError):
        Requirement.parse(text)


def test_requirement_parses_several():
    r = Requirement.parse("cos<=0.005,rel_l2<=0.01")
    assert [b.metric for b in r.bounds] == ["cos", "rel_l2"]
    assert r.holds({"cos": 0.001, "rel_l2": 0.001}) and not r.holds({"cos": 0.01, "rel_l2": 0.001})
