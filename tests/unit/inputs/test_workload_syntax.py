"""A workload of several sets of shapes on the command line (tuner.inputs.workload): the --shape syntax with
@WEIGHT, the one-line refusals, the shares, and batches cut from --data's."""
import numpy as np
import pytest

from tuner.errors import UserError
from tuner.inputs.workload import ShapeSet, cut_batches, parse_workload, set_label, weights


def test_items_without_weights_are_one_set_as_before():
    assert parse_workload(["ids=8x128", "mask=8x128"]) == [ShapeSet({"ids": (8, 128), "mask": (8, 128)}, 1.0)]
    assert parse_workload(None) == [] and parse_workload([]) == []


def test_each_weighted_item_is_one_set_naming_its_inputs_with_commas():
    sets = parse_workload(["ids=1x16,mask=1x16@0.7", "ids=32x128,mask=32x128@0.3"])
    assert sets == [ShapeSet({"ids": (1, 16), "mask": (1, 16)}, 0.7), ShapeSet({"ids": (32, 128), "mask": (32, 128)}, 0.3)]
    assert weights(sets) == pytest.approx([0.7, 0.3])
    assert set_label(sets[1].shapes) == "ids=32x128,mask=32x128"


def test_weights_are_shares_of_their_sum():
    assert weights(parse_workload(["x=1@3", "x=2@1"])) == pytest.approx([0.75, 0.25])
    assert weights(parse_workload(["x=1@1"])) == [1.0]


@pytest.mark.parametrize("items, words", [
    (["x=1x16", "x=32x128"], "names input 'x' twice; for a workload of several shapes give each set a weight"),
    (["x=1x16@0.7", "x=32x128"], "--shape 'x=32x128' has no @WEIGHT while others have one"),
    (["x=1x16@0", "x=2x16@1"], "the weight after @ must be a positive number, e.g. x=1x16@0.5"),
    (["x=1x16@-1", "x=2x16@1"], "the weight after @ must be a positive number"),
    (["x=1x16@nan", "x=2x16@1"], "the weight after @ must be a positive number"),
    (["x=1x16@inf", "x=2x16@1"], "the weight after @ must be a positive number"),
    (["x=1x16@heavy", "x=2x16@1"], "the weight after @ must be a positive number"),
    (["x=1x16,y=1@1", "x=2x16@1"],
     "--shape 'x=2x16@1' names x, but 'x=1x16,y=1@1' names x, y; every set of a workload names the same inputs"),
    (["x=2x16@1", "y=1,x=1x16@1"],
     "--shape 'y=1,x=1x16@1' names x, y, but 'x=2x16@1' names x; every set of a workload names the same inputs"),
    (["x=1x16@1", "x=1x16@2"], "the workload has this set twice; give it once with the sum of the weights"),
    (["x=1x16,x=2x16@1", "x=3x16@1"], "names input 'x' twice; one set names each input once"),
    (["x:1x16@1"], "NAME:DIMS is trtexec's and Polygraphy's syntax"),
])
def test_a_malformed_workload_is_one_line_naming_the_fix(items, words):
    with pytest.raises(UserError) as err:
        parse_workload(items)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_batches_are_cut_to_each_set_keeping_the_leading_part_of_every_dimension():
    ids = np.arange(2 * 4 * 6).reshape(2, 4, 6)  # two batches of [4, 6]
    mask = np.ones_like(ids)
    batches = [{"ids": ids[i], "mask": mask[i], "fixed": np.zeros(3)} for i in range(2)]
    cut = cut_batches(batches, {"ids": (2, 3), "mask": (2, 3)}, "d.npz")
    assert [b["ids"].shape for b in cut] == [(2, 3), (2, 3)] and cut[0]["mask"].shape == (2, 3)
    assert cut[1]["ids"].tolist() == ids[1][:2, :3].tolist()  # the first rows' first tokens
    assert cut[0]["fixed"].shape == (3,)  # an input the set does not name keeps the data's shape
    whole = cut_batches(batches, {"ids": (4, 6)}, "d.npz")  # the data's own shape is a set it can feed
    assert whole[1]["ids"].tolist() == ids[1].tolist()


def test_a_set_larger_than_the_data_cannot_be_cut_from_it():
    batches = [{"ids": np.zeros((4, 6))}]
    with pytest.raises(UserError) as err:
        cut_batches(batches, {"ids": (4, 8)}, "d.npz")
    assert str(err.value) == ("--shape ids=4x8: --data d.npz has ids batches of 4x6, and a workload's shapes are cut "
                              "from the data's, so none may be larger; give data at the largest shape of the workload")
    with pytest.raises(UserError):
        cut_batches(batches, {"ids": (4,)}, "d.npz")  # another rank
