"""plans_fast / plans_full (tuner.search.plans), checked exactly on a small conditional space and on the
built-in space files."""
from __future__ import annotations

import itertools
import os

from plan_spaces import conditional_params

from tuner.inputs.configs import grid_values
from tuner.inputs.space import SPACES_DIR, Param, load_space
from tuner.search.plans import activation, active_config, fast_plans_with_knobs, plan_key, plans_fast, plans_full


def brute_force(params: list[Param], values: dict[str, list] | None = None) -> set[str]:
    """Every distinct normalized config of the product of all values, activity ignored."""
    values = values or {p.name: grid_values(p) for p in params}
    names = [p.name for p in params]
    return {plan_key(active_config(params, dict(zip(names, combo)))) for combo in itertools.product(*(values[n] for n in names))}


def test_full_is_the_product_of_the_active_subspaces():
    params = conditional_params()
    plans = plans_full(params)
    keys = [plan_key(p) for p in plans]
    # a=x: d*e = 6; a=z: 6; a=y,b=False: 6; a=y,b=True: c*d*e*f = 36
    assert len(plans) == 54
    assert len(set(keys)) == len(keys)
    assert set(keys) == brute_force(params)
    assert plans[0] == {"a": "x", "d": "p", "e": 0.5}  # the baseline first
    for p in plans:  # only active params
        assert p == active_config(params, p)


def test_full_over_some_knobs_adds_the_parents_that_activate_them():
    params = conditional_params()
    plans = plans_full(params, ["c"])
    # c needs a=y and b=True: a in {x, y}, b in {False, True}; every other knob at its default
    expected = brute_force(params, {"a": ["x", "y"], "b": [False, True], "c": [1, 2, 3], "d": ["p"], "e": [0.5], "f": ["u"]})
    assert len(plans) == 5 and {plan_key(p) for p in plans} == expected
    assert plans_full(params, []) == [plans_full(params)[0]]


def test_fast_changes_one_knob_plus_required_parents():
    params = conditional_params()
    base = {"a": "x", "d": "p", "e": 0.5}
    assert plans_fast(params) == [
        base,
        {"a": "y", "b": False, "d": "p", "e": 0.5},
        {"a": "z", "d": "p", "e": 0.5},
        {"a": "y", "b": True, "c": 1, "d": "p", "e": 0.5, "f": "u"},
        {"a": "y", "b": True, "c": 2, "d": "p", "e": 0.5, "f": "u"},
        {"a": "y", "b": True, "c": 3, "d": "p", "e": 0.5, "f": "u"},
        {"a": "x", "d": "q", "e": 0.5},
        {"a": "x", "d": "p", "e": 0.0},
        {"a": "x", "d": "p", "e": 1.0},
        {"a": "y", "b": True, "c": 1, "d": "p", "e": 0.5, "f": "v"},
    ]
    by_name = {p.name: p for p in params}
    for knob, plan in fast_plans_with_knobs(params)[1:]:
        parents = activation(by_name[knob], params)
        assert plan == active_config(params, {**parents, knob: plan[knob]})
        assert plan[knob] != by_name[knob].default
        changed = {k for k in plan if k not in base or plan[k] != base[k]}
        # the knob, its parents, and params those activate (at their default)
        assert changed - {knob} - set(parents) <= {k for k in plan if k not in base and plan[k] == by_name[k].default}


def test_built_in_onnxruntime_spaces():
    small = load_space(os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml")).params
    assert len(plans_full(small)) == 2 * 3 * 2 * 2
    assert len(plans_fast(small)) == 1 + 1 + 2 + 1 + 1
    full = load_space(os.path.join(SPACES_DIR, "onnxruntime-cpu.yaml")).params
    fast = plans_fast(full)
    assert len({plan_key(p) for p in fast}) == len(fast)
    static_uint8 = [p for p in fast if p.get("weight_type") == "QUInt8"]
    assert static_uint8 == [{**fast[0], "precision": "int8-static", "quant_op_types": "weights", "calibration_method": "MinMax",
                             "static_per_channel": False, "activation_type": "QUInt8", "weight_type": "QUInt8"}]
    inter = [p for p in fast if "inter_op_num_threads" in p]  # parent execution_mode set to parallel
    assert inter and all(p["execution_mode"] == "parallel" for p in inter)
    for knobs in (["precision"], ["dyn_per_channel", "intra_op_spinning"], ["weight_type"]):
        plans = plans_full(full, knobs)
        assert len({plan_key(p) for p in plans}) == len(plans)


def test_tensorrt_route_knobs_are_planned_like_any_knob():
    """route/ parameters have a '/' in their name but are the space's own knobs, not per-layer ones."""
    params = load_space(os.path.join(SPACES_DIR, "tensorrt.yaml")).params
    changed = {knob for knob, _ in fast_plans_with_knobs(params)[1:]}
    assert {"route/conv_use_long_w", "route/kgen:codegen:cuda_tile"} <= changed
    off = [p for p in plans_fast(params) if p["route/conv_use_long_w"] == "off"]
    assert off == [{**plans_fast(params)[0], "route/conv_use_long_w": "off"}]
    assert all(p["route/kgen:codegen:cuda_tile"] == "1" for p in plans_full(params, ["route/conv_use_long_w"]))
    assert len(plans_full(params, ["route/conv_use_long_w", "route/kgen:codegen:cuda_tile"])) == 2 * 4
