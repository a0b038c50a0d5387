"""TensorRT 11.1's build routes without TensorRT: the knob-database parser and the route-to-parameters
expansion against a fixture in the format of TensorRT 11.1's NvInfer.h (IBuilderConfig::getAllBuildRoutes),
route strings, and `tuner routes --from-file`. The fixture's first two knobs are the header's example;
the other entries are marked SYNTHETIC and exercise the edge cases trtexec's parser describes."""
import json
import os

import pytest

from tuner.backends.tensorrt.routes import (
    allowed_values,
    check_space_routes,
    format_json,
    format_table,
    format_yaml,
    option_name,
    param_name,
    parse_knob_database,
    parse_route,
    route_string,
    space_parameters,
)
from tuner.cli.main import main
from tuner.inputs.space import SPACES_DIR, Param, load_space

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "all_build_routes_11.1.json")


@pytest.fixture(scope="module")
def text():
    with open(FIXTURE) as f:
        return f.read()


def test_parses_the_header_format(text):
    db = parse_knob_database(text)
    assert db.tuner_version == "2.19.15"
    assert [k.option for k in db.knobs] == ["-conv_use_long_w", "-kgen:codegen:cuda_tile",
                                            "-synthetic_unbounded_int", "-synthetic_open_range"]  # no-option entry skipped
    tile = db.get("route/kgen:codegen:cuda_tile")
    assert tile.values == ("0", "1", "2", "3") and tile.default == "1" and tile.help.startswith("CUDA Tile")
    assert db.get("conv_use_long_w") is db.get("-conv_use_long_w") is db.knobs[0]


@pytest.mark.parametrize("allowed, values", [
    ("-a=[on|off]", ("on", "off")), ("-a=[ 0 | 1 ]", ("0", "1")), ("-a=int32_t", ()), ("-a=[0|1|...|64]", ()), ("", ()),
])
def test_allowed_values(allowed, values):
    assert allowed_values(allowed) == values


def test_names_round_trip():
    assert param_name("-kgen:tiling") == "route/kgen:tiling"
    assert option_name("route/kgen:tiling") == option_name("kgen:tiling") == option_name("-kgen:tiling") == "-kgen:tiling"


def test_empty_and_malformed():
    assert parse_knob_database("").knobs == ()  # platforms without the tuner return ""
    with pytest.raises(ValueError, match="not JSON") as e:
        parse_knob_database("{oops")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="tuner_options"):
        parse_knob_database(json.dumps({"tuner_version": "1"}))


def test_knobs_become_space_parameters(text):
    db = parse_knob_database(text)
    params, skipped = space_parameters(db)
    assert params == {
        "route/conv_use_long_w": {"type": "categorical", "choices": ["on", "off"], "default": "on"},
        "route/kgen:codegen:cuda_tile": {"type": "categorical", "choices": ["0", "1", "2", "3"], "default": "1"},
    }
    assert len(skipped) == 2 and all("not enumerable" in s for s in skipped)
    params, skipped = space_parameters(db, ["kgen:codegen:cuda_tile", "no_such"])
    assert list(params) == ["route/kgen:codegen:cuda_tile"] and "no such knob" in skipped[0]


def test_route_string_keeps_only_non_defaults_in_database_order(text):
    db = parse_knob_database(text)
    config = {"route/kgen:codegen:cuda_tile": "2", "route/conv_use_long_w": "off", "precision": "fp16"}
    assert route_string(config, db) == ("-conv_use_long_w=off -kgen:codegen:cuda_tile=2", [])
    assert route_string({"route/conv_use_long_w": "on"}, db) == ("", [])  # all defaults: no route
    assert route_string({"route/synthetic_unbounded_int": 7}, db) == ("-synthetic_unbounded_int=7", [])
    route, dropped = route_string({"route/conv_use_long_w": "maybe", "route/gone": "1"}, db)
    assert route == "" and len(dropped) == 2 and "not one of" in dropped[0] and "no knob -gone" in dropped[1]
    assert parse_route("-conv_use_long_w=off -kgen:codegen:cuda_tile=2") == {
        "-conv_use_long_w": "off", "-kgen:codegen:cuda_tile": "2"}
    with pytest.raises(ValueError):
        parse_route("conv_use_long_w")


def test_help_output(text):
    db = parse_knob_database(text)
    table = format_table(db)
    assert "tuner_version 2.19.15: 4 knobs" in table and "-kgen:codegen:cuda_tile          [0|1|2|3] default 1" in table
    assert json.loads(format_json(text, "conv_use_long_w"))["default_value"] == "on"  # dash optional
    assert json.loads(format_json(text, "-conv_use_long_w"))["option"] == "-conv_use_long_w"
    assert json.loads(format_json(text))["tuner_version"] == "2.19.15"
    with pytest.raises(ValueError, match="no knob -nope"):
        format_table(db, "nope")


def test_a_users_space_restricts_or_extends_the_knobs(text):
    db = parse_knob_database(text)
    space = [Param("precision", "categorical", "fp32", ["fp32"]),
             Param("route/conv_use_long_w", "categorical", "on", ["on"]),  # restricted: nothing to search
             Param("route/kgen:codegen:cuda_tile", "categorical", "1", ["1", "3", "9"]),
             Param("route/not_in_this_tensorrt", "categorical", "a", ["a", "b"]),
             Param("route/synthetic_open_range", "categorical", "8", ["8", "16"]),  # extended: an unbounded knob
             Param("route/conv_use_long_w2", "categorical", True, [True, False])]
    lines = check_space_routes(space, db)
    assert lines[0] == "route/conv_use_long_w: searched over ['on']"
    assert lines[1].startswith("route/kgen:codegen:cuda_tile: ['9'] not among ['0', '1', '2', '3']")
    assert "no knob -not_in_this_tensorrt" in lines[2] and "every trial drops it" in lines[2]
    assert lines[3] == "route/synthetic_open_range: searched over ['8', '16']"
    assert len(lines) == 5 and check_space_routes(space[:1], db) == [
        "the space has no route/ parameters: no build-route knob is searched"]
    yes_no = check_space_routes([Param("route/conv_use_long_w", "categorical", True, [True, False])], db)
    assert "quote them" in yes_no[0]


def test_routes_command_from_a_saved_database(capsys, demo_path):
    assert main(["routes", demo_path, "--from-file", FIXTURE]) == 0
    assert "-conv_use_long_w                 [on|off] default on" in capsys.readouterr().out
    assert main(["routes", "--from-file", FIXTURE, "--json", "--knob", "kgen:codegen:cuda_tile"]) == 0
    assert json.loads(capsys.readouterr().out)["default_value"] == "1"
    assert main(["routes", "--from-file", FIXTURE, "--yaml", "conv_use_long_w"]) == 0
    assert '"route/conv_use_long_w": {type: categorical, choices: ["on", "off"], default: "on"}' in capsys.readouterr().out
    assert main(["routes", "--from-file", FIXTURE, "--space", os.path.join(SPACES_DIR, "tensorrt.yaml")]) == 0
    assert "route/kgen:codegen:cuda_tile: searched over ['0', '1', '2', '3']" in capsys.readouterr().out
    assert main(["routes", "--from-file", FIXTURE, "--knob", "nope"]) == 2
    assert "no knob -nope" in capsys.readouterr().err
    assert main(["routes", "--from-file", "/no/such.json"]) == 2
    assert "tuner routes --json > FILE" in capsys.readouterr().err


def test_a_route_the_space_wrote_as_yaml_is_a_valid_space(tmp_path, text):
    """`tuner routes --yaml` lines pasted under `parameters:` load as a space."""
    db = parse_knob_database(text)
    params, _ = space_parameters(db)
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\nbackend: tensorrt\nparameters:\n" + format_yaml(params, db) + "\n")
    assert [p.name for p in load_space(str(path)).params] == list(params)
