"""TensorRT's tuning strategies as plans over a space's knobs, pure: `fast` (the baseline, then one knob
changed at a time) and `full` (every active combination). The samplers that run them are in
tuner.search.plan_samplers.

A plan is a config over the knobs (tuner.inputs.space.Param) holding only active parameters, as
tuner.inputs.space.normalize would give it; plan_key names it across processes.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..inputs.configs import grid_values
from ..inputs.space import Param

Config = dict[str, Any]


def knobs_of(params: Sequence[Param]) -> list[Param]:
    """The planned parameters ("knobs"): a space's own parameters. Per-layer parameters are not among
    them (they are made per model by tuner.inputs.space.normalize), so they are never planned; names with a
    '/' in a space (TensorRT's route/ knobs) are knobs like any other."""
    return list(params)


def canon(p: Param, v: Any) -> Any:
    """A value in the form Optuna gives back (int for int, float for float), so keys compare equal."""
    if p.type == "int" and isinstance(v, (int, float)) and not isinstance(v, bool):
        return int(v)
    if p.type == "float" and isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return v


def _active(when: Mapping[str, list], config: Mapping[str, Any]) -> bool:
    return all(dep in config and config[dep] in vals for dep, vals in when.items())


def active_config(params: Sequence[Param], values: Mapping[str, Any]) -> Config:
    """The knobs' config for `values` (missing knobs at their default): walks the knobs in order
    like tuner.inputs.space.normalize and keeps only the active ones."""
    config: Config = {}
    for p in knobs_of(params):
        if _active(p.when, config):
            config[p.name] = canon(p, values.get(p.name, p.default))
    return config


def plan_key(config: Mapping[str, Any]) -> str:
    """Canonical JSON of a config: equal configs, equal keys."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def _values(p: Param) -> list:
    """grid_values(p) with the default first and no repeats."""
    out = [canon(p, p.default)]
    for v in grid_values(p):
        v = canon(p, v)
        if v not in out:
            out.append(v)
    return out


def activation(p: Param, params: Sequence[Param]) -> dict[str, Any]:
    """The parent values that make `p` active, starting from the defaults: each parent (recursively
    activated first) whose default is not allowed gets its first grid value listed in p.when."""
    by_name = {q.name: q for q in params}
    out: dict[str, Any] = {}

    def visit(q: Param) -> None:
        for parent_name, allowed in q.when.items():
            parent = by_name[parent_name]
            visit(parent)
            if out.get(parent_name, canon(parent, parent.default)) not in allowed:
                out[parent_name] = next((v for v in _values(parent) if v in allowed), allowed[0])

    visit(p)
    return out


def fast_plans_with_knobs(params: Sequence[Param]) -> list[tuple[str | None, Config]]:
    """plans_fast with, per plan, the knob it changes (None for the baseline)."""
    knobs = knobs_of(params)
    base = active_config(knobs, {})
    out: list[tuple[str | None, Config]] = [(None, base)]
    seen = {plan_key(base)}
    for p in knobs:
        parents = activation(p, knobs)
        for v in _values(p)[1:]:
            config = active_config(knobs, {**parents, p.name: v})
            if config.get(p.name, object()) != v or plan_key(config) in seen:
                continue  # the conditions cannot activate it, or the same build is planned already
            seen.add(plan_key(config))
            out.append((p.name, config))
    return out


def plans_fast(params: Sequence[Param]) -> list[Config]:
    """The baseline, then per knob (space order) each of its other grid values with every other knob
    at its default; a knob inactive under the defaults gets its parents set by `activation`.
    Every plan is distinct and holds only active knobs."""
    return [c for _, c in fast_plans_with_knobs(params)]


def plans_full(params: Sequence[Param], knobs: Iterable[str] | None = None) -> list[Config]:
    """Every distinct active combination of the listed knobs' grid values (all knobs when None);
    unlisted knobs stay at their default, except that an unlisted parent of a listed knob also takes
    the value that activates it (as in plans_fast). Inactive knobs are dropped, so no two plans are
    the same config; the first plan is the baseline."""
    ks = knobs_of(params)
    chosen = {p.name for p in ks} if knobs is None else set(knobs)
    values = {p.name: _values(p) if p.name in chosen else [canon(p, p.default)] for p in ks}
    for p in ks:
        if p.name in chosen:
            for parent, v in activation(p, ks).items():
                if parent not in chosen and v not in values[parent]:
                    values[parent].append(v)
    out: list[Config] = []

    def walk(i: int, config: Config) -> None:
        if i == len(ks):
            out.append(dict(config))
            return
        p = ks[i]
        if not _active(p.when, config):
            walk(i + 1, config)
            return
        for v in values[p.name]:
            config[p.name] = v
            walk(i + 1, config)
            del config[p.name]

    walk(0, {})
    return out
