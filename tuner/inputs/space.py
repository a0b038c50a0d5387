"""Space files: the schema (parameters, per-layer overrides), loading and validating the YAML. What a
trial or --set values make of a space (a normalized config, its key) is tuner.inputs.configs."""
from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from ..errors import UserError
from .user_paths import check_input_file


def _spaces_dir() -> str:
    """The built-in spaces: the repository's search_spaces/, installed as the package tuner.search_spaces."""
    spec = importlib.util.find_spec("tuner.search_spaces")
    if spec is not None and spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tuner/, beside search_spaces/
    return os.path.join(os.path.dirname(package), "search_spaces")


def _openvino_installed() -> bool:
    """Whether OpenVINO is installed here, found without importing it (the search must not load a
    backend library); a broken install still loads no problem: its choices are dropped with a note."""
    try:
        return importlib.util.find_spec("openvino") is not None
    except (ImportError, ValueError):
        return False


SPACES_DIR = _spaces_dir()
# One study across the CPU backends where OpenVINO is installed, else ONNX Runtime's space.
DEFAULT_SPACE = os.path.join(SPACES_DIR, "cpu.yaml" if _openvino_installed() else "onnxruntime-cpu.yaml")
TYPES = {"categorical", "bool", "int", "float"}
PARAM_KEYS = {"type", "choices", "low", "high", "log", "default", "when", "key"}
OVERRIDE_KEYS = {"when", "unless", "op_types", "granularity", "group_pattern", "encoding", "near", "sensitivity_route",
                 "key"}
ROUTE_KEY = "precision"  # the config key of a precision route (whatever the parameter is called)
BACKEND = "backend"  # the parameter that chooses the backend in a space over several
ENCODINGS = ("independent", "sensitivity", "groups", "auto")
# encoding auto: one boolean per candidate up to this many candidates (TPE handles a handful), the
# sensitivity ranking above it (one boolean per layer is too big a space for a few dozen trials).
AUTO_INDEPENDENT_MAX = 6


@dataclass
class Param:
    name: str
    type: str
    default: Any
    choices: list | None = None
    low: float | None = None
    high: float | None = None
    log: bool = False
    when: dict[str, list] = field(default_factory=dict)
    # The config key the backend reads (default: the name). Two backends' parameters in one space
    # can share a key (`precision`) under different names (`precision`, `ov_precision`).
    key: str = ""

    def __post_init__(self) -> None:
        self.key = self.key or self.name


@dataclass
class LayerOverride:
    name: str
    when: dict[str, list]
    op_types: list[str]
    granularity: str = "node"
    group_pattern: str | None = None
    # independent: one boolean per candidate; sensitivity: "keep the k most sensitive in float"
    # plus booleans for the `near` candidates just past the greedy cut; groups: one boolean per
    # group_pattern match.
    encoding: str = "independent"
    near: int = 3
    sensitivity_route: str | None = None
    key: str = ""  # the config key of the kept-in-float node list (default: the name)
    # Where no layer may stay in float although `when` holds: {PARAM: [VALUES]}, any one active with one
    # of its values (OpenVINO's SmoothQuant on: its scaling stays in place on a layer kept in float).
    unless: dict[str, list] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.key = self.key or self.name


@dataclass
class Space:
    path: str
    name: str
    backend: str
    params: list[Param]
    overrides: list[LayerOverride]

    @property
    def backends(self) -> list[str]:
        """The backends its candidates are built with: the choices of a `backend` parameter, else `backend:`."""
        chooser = self.param(BACKEND)
        return [str(c) for c in chooser.choices] if chooser is not None else [self.backend]

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def conditions(self, when: dict[str, list]) -> dict[str, set]:
        """Everything a `when` implies, its parameters' own conditions included: {parameter: allowed values}."""
        return _implied(when, {p.name: p for p in self.params})

    def backends_of(self, when: dict[str, list]) -> list[str]:
        """The backends under which something with this condition can be active."""
        allowed = self.conditions(when).get(BACKEND)
        return [b for b in self.backends if allowed is None or b in allowed]

    def route_param(self, override: LayerOverride) -> tuple[str, list]:
        """(name of the parameter whose value is the route, the routes) of a per-layer override's `when`."""
        return _route_condition(override.when, {p.name: p for p in self.params})

    def keys(self, values: dict[str, Any]) -> dict[str, Any]:
        """Values by parameter name -> values by config key (per-layer names stay as they are)."""
        by_name = {p.name: p.key for p in self.params}
        return {by_name.get(k, k): v for k, v in values.items()}

    def with_param(self, name: str, new: Param | None) -> Space:
        """This space with parameter `name` replaced by `new` (None: removed), and every parameter or
        override whose condition can no longer hold removed with it."""
        params = [new if p.name == name else p for p in self.params]
        kept: dict[str, Param] = {}
        for p in params:
            if p is not None and _satisfiable(p.when, kept):
                kept[p.name] = replace(p, when=_narrowed(p.when, kept))
        overrides = [replace(o, when=_narrowed(o.when, kept)) for o in self.overrides if _satisfiable(o.when, kept)]
        return replace(self, params=list(kept.values()), overrides=overrides)


def _implied(when: dict[str, list], by_name: dict[str, Param]) -> dict[str, set]:
    """{parameter: allowed values} of a condition and of its parameters' own conditions, intersected."""
    out: dict[str, set] = {}

    def allow(name: str, values: set) -> None:
        out[name] = out[name] & values if name in out else set(values)

    for dep, values in when.items():
        allow(dep, set(values))
        for name, inherited in (_implied(by_name[dep].when, by_name) if dep in by_name else {}).items():
            allow(name, inherited)
    return out


def _route_condition(when: dict[str, list], by_name: dict[str, Param]) -> tuple[str, list]:
    for dep, values in when.items():
        if dep in by_name and by_name[dep].key == ROUTE_KEY:
            return dep, list(values)
    return ROUTE_KEY, []


def _satisfiable(when: dict[str, list], kept: dict[str, Param]) -> bool:
    return all(dep in kept and (kept[dep].choices is None or any(v in kept[dep].choices for v in vals))
               for dep, vals in when.items())


def _narrowed(when: dict[str, list], kept: dict[str, Param]) -> dict[str, list]:
    return {dep: [v for v in vals if kept[dep].choices is None or v in kept[dep].choices] for dep, vals in when.items()}


def _cores(v):
    return os.cpu_count() or 1 if v == "cores" else v


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load, except that a key given twice is an error: PyYAML keeps the last silently."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is given twice (line "
                                                        f"{key_node.start_mark.line + 1}); keep one", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def group_pattern_problem(pattern: str | None) -> str | None:
    """Why a group regex cannot name layer groups, or None: it must compile and have one capture group."""
    try:
        groups = re.compile(pattern or "").groups
    except re.error as exc:
        return f"not a valid regular expression: {exc}"
    if groups != 1:
        return (f"{pattern!r} has {groups} capture groups; it needs exactly one, the group's name, "
                "e.g. '^(block\\d+)/'")
    return None


def builtin_spaces() -> list[str]:
    return sorted(os.path.splitext(f)[0] for f in os.listdir(SPACES_DIR) if f.endswith(".yaml"))


def space_file(name_or_path: str) -> str:
    """--space takes a YAML file or a built-in space's name (`openvino-cpu`, as `tuner space` lists them)."""
    builtin = os.path.join(SPACES_DIR, f"{name_or_path}.yaml")
    if not os.path.exists(name_or_path) and os.sep not in name_or_path and os.path.isfile(builtin):
        return builtin
    return name_or_path


def load_space(path: str | None = None) -> Space:
    path = space_file(path or DEFAULT_SPACE)
    check_input_file(path, "space", f"give a YAML file or a built-in space: {', '.join(builtin_spaces())}")
    try:
        with open(path) as f:
            doc = yaml.load(f, _UniqueKeyLoader)  # noqa: S506 - a SafeLoader: plain data only
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None

    def fail(where: str, problem: str):
        raise UserError(f"{path}: {where}: {problem}")

    if not isinstance(doc, dict):
        fail("top level", "expected a mapping with name, backend, parameters")
    unknown = set(doc) - {"name", "backend", "parameters", "layer_overrides"}
    if unknown:
        fail("top level", f"unknown key(s) {sorted(unknown)}; allowed: name, backend, parameters, layer_overrides")
    if not isinstance(doc.get("parameters"), dict) or not doc["parameters"]:
        fail("parameters", "missing or empty; expected a mapping of parameter name -> definition")
    params: list[Param] = []
    for name, d in doc["parameters"].items():
        where = f"parameters.{name}"
        _check_entry(fail, where, d, PARAM_KEYS, "a mapping with type, choices or low/high, default")
        t = d.get("type")
        if t not in TYPES:
            fail(f"{where}.type", f"{t!r} is not one of {sorted(TYPES)}")
        key = d.get("key", name)
        if not isinstance(key, str) or not key:
            fail(f"{where}.key", f"{key!r} is not a config key (a non-empty name)")
        p = Param(name, t, _cores(d.get("default")), d.get("choices"), _cores(d.get("low")), _cores(d.get("high")),
                  bool(d.get("log", False)), d.get("when") or {}, key)
        if t == "bool":
            p.choices = [False, True]
            if p.default is None:
                p.default = False
        if t == "categorical" and (not isinstance(p.choices, list) or not p.choices):
            fail(f"{where}.choices", "a categorical parameter needs a non-empty list of choices")
        if t in ("int", "float"):
            for k in ("low", "high"):
                if not isinstance(getattr(p, k), (int, float)) or isinstance(getattr(p, k), bool):
                    fail(f"{where}.{k}", f"needs a number (or 'cores'), got {getattr(p, k)!r}")
            if p.low > p.high:
                fail(where, f"low {p.low} > high {p.high}")
            if t == "int" and not (isinstance(p.default, int) and p.low <= p.default <= p.high) and p.default is not None:
                p.default = max(p.low, min(p.high, int(p.default)))
        if p.default is None:
            fail(f"{where}.default", "missing; give the backend's own heuristic default")
        if p.choices is not None and p.default not in p.choices:
            fail(f"{where}.default", f"{p.default!r} is not one of the choices {p.choices}")
        params.append(p)
    names = {p.name for p in params}
    seen: set[str] = set()
    for p in params:
        _check_when(fail, f"parameters.{p.name}.when", p.when, names, seen, params)
        seen.add(p.name)
    overrides = []
    layer_overrides = doc.get("layer_overrides") or {}
    if not isinstance(layer_overrides, dict):
        fail("layer_overrides", "expected a mapping of override name -> definition")
    for oname, d in layer_overrides.items():
        where = f"layer_overrides.{oname}"
        _check_entry(fail, where, d, OVERRIDE_KEYS, "a mapping with when, op_types, granularity")
        encoding = d.get("encoding", "independent")
        if encoding not in ENCODINGS:
            fail(f"{where}.encoding", f"{encoding!r} is not one of {', '.join(ENCODINGS)}")
        gran = d.get("granularity", "group" if encoding == "groups" else "node")
        if encoding == "groups" and gran != "group":
            fail(f"{where}.granularity", "encoding groups needs granularity group (or leave granularity out)")
        near = d.get("near", 3)
        if not isinstance(near, int) or isinstance(near, bool) or near < 0:
            fail(f"{where}.near", f"{near!r} is not a count (0 or more)")
        _check_when(fail, f"{where}.when", d.get("when") or {}, names, names, params)
        _check_when(fail, f"{where}.unless", d.get("unless") or {}, names, names, params)
        _, routes = _route_condition(d.get("when") or {}, {p.name: p for p in params})
        route = d.get("sensitivity_route", routes[0] if routes else None)
        if encoding in ("sensitivity", "auto") and route not in routes:
            fail(f"{where}.sensitivity_route", f"{route!r} is not one of the routes in its when: {routes}")
        if gran not in ("node", "group"):
            fail(f"{where}.granularity", f"{gran!r} is not node or group")
        if gran == "group":
            if not d.get("group_pattern"):
                fail(f"{where}.group_pattern", "granularity group needs a group_pattern with one capture group")
            problem = group_pattern_problem(d["group_pattern"])
            if problem:
                fail(f"{where}.group_pattern", problem)
        ops = d.get("op_types")
        if not isinstance(ops, list) or not ops:
            fail(f"{where}.op_types", "needs a non-empty list of ONNX op types")
        key = d.get("key", oname)
        if not isinstance(key, str) or not key:
            fail(f"{where}.key", f"{key!r} is not a config key (a non-empty name)")
        overrides.append(LayerOverride(oname, d.get("when") or {}, ops, gran, d.get("group_pattern"), encoding, near, route,
                                       key, d.get("unless") or {}))
    _check_keys(fail, params, overrides)
    return Space(path, str(doc.get("name", os.path.basename(path))), str(doc.get("backend", "onnxruntime")), params, overrides)


def _check_keys(fail, params: list[Param], overrides: list[LayerOverride]) -> None:
    """Two parameters (or overrides) that write the same config key must never be active together:
    some parameter must take disjoint values in their conditions (e.g. backend onnxruntime / openvino)."""
    by_name = {p.name: p for p in params}
    items = [(f"parameters.{p.name}", p.key, p.when) for p in params] + \
            [(f"layer_overrides.{o.name}", o.key, o.when) for o in overrides]
    for i, (where, key, when) in enumerate(items):
        for other, other_key, other_when in items[:i]:
            if key != other_key:
                continue
            a, b = _implied(when, by_name), _implied(other_when, by_name)
            if not any(dep in b and not (a[dep] & b[dep]) for dep in a):
                fail(f"{where}.key", f"{other} writes config key {key!r} too and both can be active in one "
                                     "config; give them conditions that exclude each other (e.g. different backends)")


def _check_entry(fail, where: str, entry, allowed: set[str], expected: str) -> None:
    """One entry of a space file section: a mapping whose keys are all known."""
    if not isinstance(entry, dict):
        fail(where, f"expected {expected}")
    bad = set(entry) - allowed
    if bad:
        fail(where, f"unknown key(s) {sorted(bad)}; allowed: {sorted(allowed)}")


def _check_when(fail, where, when, names, earlier, params):
    if not isinstance(when, dict):
        fail(where, "expected a mapping {PARAM: [VALUES]}")
    by_name = {p.name: p for p in params}
    for dep, values in when.items():
        if dep not in names:
            fail(where, f"condition on unknown parameter {dep!r}")
        if dep not in earlier:
            fail(where, f"condition on {dep!r}, which must be defined above it")
        vals = values if isinstance(values, list) else [values]
        choices = by_name[dep].choices
        if choices is not None:
            for v in vals:
                if v not in choices:
                    fail(where, f"{dep}={v!r} is not one of its choices {choices}")
        when[dep] = vals
