"""A shape as --shape writes it and reads it back (tuner.inputs.model.shape_text, parse_shape_profile): every
message and flag that names a shape writes it one way."""
from tuner.inputs.model import parse_shape_profile, shape_text


def test_a_shape_is_written_as_shape_takes_it():
    assert shape_text((8, 128)) == "8x128" and shape_text([1]) == "1" and shape_text(()) == ""
    assert parse_shape_profile([f"ids={shape_text((8, 128))}"]) == {"ids": (8, 128)}
