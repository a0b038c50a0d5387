"""What a space makes of a trial or of --set values: the normalized config (routes, per-layer float
sets under their conditions and rankings) and its key, and the Optuna choosers that propose values."""
from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

import yaml

from ..errors import UserError
from .space import AUTO_INDEPENDENT_MAX, BACKEND, ROUTE_KEY, LayerOverride, Param, Space


def _active(when: dict[str, list], config: dict) -> bool:
    return all(dep in config and config[dep] in vals for dep, vals in when.items())


def override_active(o: LayerOverride, values: dict) -> bool:
    """Whether layers may stay in float under these parameter values (by name): its `when` holds and no
    `unless` parameter is active with one of its values."""
    return _active(o.when, values) and not any(dep in values and values[dep] in vals for dep, vals in o.unless.items())


def variant_matches(ranking: dict | None, config: dict) -> bool:
    """Whether a sensitivity ranking applies to `config`: the ranking was measured for one variant of its
    route (tuner.analysis.variants: the route options it stores as `variant`, config keys), so its top_k / near
    parameters exist only under that variant; a config of the same route with other options keeps every
    layer quantized. Another route of the same override uses the ranking as it is (as before variants),
    and a ranking stored without a variant applies everywhere."""
    if not ranking:
        return False
    variant, route = ranking.get("variant"), (ranking.get("route") or {}).get(ROUTE_KEY)
    if not variant or config.get(ROUTE_KEY) != route:
        return True
    return all(config.get(k) == v for k, v in variant.items())


def effective_encoding(override: LayerOverride, graph_nodes: list[tuple[str, str]]) -> str:
    """The encoding an override gets on this model: `auto` resolves by the number of candidates."""
    if override.encoding != "auto":
        return override.encoding
    return "independent" if len(layer_candidates(override, graph_nodes)) <= AUTO_INDEPENDENT_MAX else "sensitivity"


def layer_candidates(override: LayerOverride, graph_nodes: list[tuple[str, str]]) -> dict[str, list[str]]:
    """Per-layer parameter suffix -> the node names it controls, from (node name, op type) pairs."""
    out: dict[str, list[str]] = {}
    for name, op in graph_nodes:
        if op not in override.op_types:
            continue
        if override.granularity == "group":
            m = re.search(override.group_pattern, name)
            key = m.group(1) if m and m.groups() else (m.group(0) if m else None)
            if key is None:
                continue
        else:
            key = name
        out.setdefault(key, []).append(name)
    return out


def parse_set(items: list[str] | None, space: Space) -> dict[str, Any]:
    """`--set key=value`: values parsed as YAML scalars and checked against the parameter."""
    by_name = {p.name: p for p in space.params}
    out = {}
    for item in items or []:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise UserError(f"--set {item!r}: expected KEY=VALUE")
        value = yaml.safe_load(v)
        if k in by_name:
            p = by_name[k]
            if p.choices is not None and value not in p.choices:
                raise UserError(f"--set {k}={v}: not one of {p.choices}")
            if p.type in ("int", "float") and not (isinstance(value, (int, float)) and p.low <= value <= p.high):
                raise UserError(f"--set {k}={v}: needs a number in [{p.low}, {p.high}]")
        elif not any(k.startswith(o.name + "/") for o in space.overrides):
            close = difflib.get_close_matches(k, list(by_name) + [o.name + "/..." for o in space.overrides], n=3)
            hint = f"did you mean {' or '.join(close)}? " if close else ""
            raise UserError(f"--set {k}: unknown parameter; {hint}see `tuner space MODEL` for the list")
        out[k] = value
    return out


Chooser = Callable[[Param], Any]


def normalize(space: Space, choose: Chooser, graph_nodes: list[tuple[str, str]],
              rankings: dict[str, dict] | None = None) -> dict[str, Any]:
    """Walk the space in order, asking `choose` only for active parameters.

    Returns the normalized config: active parameters' values under their config keys, and per override
    the sorted list of node names kept in float. Inactive parameters are dropped, so equal builds get equal keys.
    rankings: per override with the sensitivity encoding, the study's ranking (tuner.analysis.sensitivity);
    without one, that override falls back to one boolean per candidate.
    """
    values: dict[str, Any] = {}  # by parameter name: what the conditions read
    config: dict[str, Any] = {}  # by config key: what the backend reads
    for p in space.params:
        if _active(p.when, values):
            values[p.name] = config[p.key] = choose(p)
    for o in space.overrides:
        if not override_active(o, values):
            continue
        ranking = (rankings or {}).get(o.name) if effective_encoding(o, graph_nodes) == "sensitivity" else None
        if ranking is None:
            kept = _independent_choice(o, graph_nodes, choose)
        elif ranking["order"] and variant_matches(ranking, config):
            kept = _ranked_choice(o, ranking, choose)
        else:  # another variant of the ranked route, or no ranking made (route dropped or skipped): all quantized
            kept = []
        config[o.key] = sorted(set(kept))
    return config


def _independent_choice(o: LayerOverride, graph_nodes, choose: Chooser) -> list[str]:
    kept: list[str] = []
    for suffix, nodes in layer_candidates(o, graph_nodes).items():
        if choose(Param(f"{o.name}/{suffix}", "bool", False, [False, True])):
            kept += nodes
    return kept


def _ranked_choice(o: LayerOverride, ranking: dict, choose: Chooser) -> list[str]:
    """Keep the k first of the ranking in float, plus any of the `near` ones just past the cut."""
    order, cut, nodes_of = ranking["order"], ranking["cut"], ranking["nodes"]
    k = choose(Param(f"{o.name}/top_k", "int", cut, low=0, high=len(order)))
    names = list(order[:k])
    for name in order[cut:cut + o.near]:
        if choose(Param(f"{o.name}/near/{name}", "bool", False, [False, True])):
            names.append(name)
    return [n for name in names for n in nodes_of[name]]


def route_choice(space: Space, config: dict) -> dict:
    """The part of a config that makes the route: the backend, the precision route and every
    parameter that depends on it (its options); not session settings, not the per-layer float set."""
    route = {p.name for p in space.params if p.key in (ROUTE_KEY, BACKEND)}
    for p in space.params:  # parameters come after those they depend on
        if any(dep in route for dep in p.when):
            route.add(p.name)
    keys = {p.key for p in space.params if p.name in route}
    return {k: v for k, v in config.items() if k in keys}


def defaults_chooser(overrides: dict[str, Any] | None = None, by_key: dict[str, Any] | None = None) -> Chooser:
    """Each parameter at `overrides[name]`, else at `by_key[its config key]` where that is one of its
    choices (a route variant's options, tuner.analysis.variants), else at its default."""
    overrides, by_key = overrides or {}, by_key or {}

    def choose(p: Param):
        if p.name in overrides:
            return overrides[p.name]
        if p.key in by_key and (p.choices is None or by_key[p.key] in p.choices):
            return by_key[p.key]
        return p.default

    return choose


def trial_chooser(trial, only: set[str] | None = None) -> Chooser:
    """Ask the Optuna trial; with `only`, parameters outside it keep their default (the grid sampler)."""

    def choose(p: Param):
        if only is not None and p.name not in only:
            return p.default
        if p.type in ("categorical", "bool"):
            return trial.suggest_categorical(p.name, p.choices)
        if p.type == "int":
            return trial.suggest_int(p.name, int(p.low), int(p.high), log=p.log)
        return trial.suggest_float(p.name, float(p.low), float(p.high), log=p.log)

    return choose


def trial_params(space: Space, choose: Chooser, graph_nodes: list[tuple[str, str]],
                 rankings: dict[str, dict] | None = None) -> dict[str, Any]:
    """The Optuna parameters (per-layer booleans included) that normalize() asks for: what to enqueue."""
    asked: dict[str, Any] = {}

    def recording(p: Param):
        asked[p.name] = choose(p)
        return asked[p.name]

    normalize(space, recording, graph_nodes, rankings)
    return asked


def grid_values(p: Param) -> list:
    """A coarse grid of one parameter: every choice; for numbers the ends, the middle and the default."""
    if p.choices is not None:
        return list(p.choices)
    if p.type == "int":
        lo, hi = int(p.low), int(p.high)
        if hi - lo < 6:
            return list(range(lo, hi + 1))
        return sorted({lo, (lo + hi) // 2, hi, int(p.default)})
    return sorted({float(p.low), float(p.high), float(p.default)})


def config_key(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]
