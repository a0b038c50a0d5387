"""Global Performance Tuner build routes (TensorRT 11.1+): the knob database and route strings.

`IBuilderConfig.all_build_routes` returns the compiler's knob database as JSON (format documented in
TensorRT 11.1's NvInfer.h, IBuilderConfig::getAllBuildRoutes):

    {"tuner_version": "2.19.15",
     "tuner_options": [{"option": "-conv_use_long_w", "allowed_values": "-conv_use_long_w=[on|off]",
                        "default_value": "on", "help": "..."}, ...]}

A build route is a whitespace-separated list of "-knob=value" tokens set on `IBuilderConfig.build_route`.
Everything here is pure, so it is checked against a fixture without TensorRT.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .knobs import ROUTE_PREFIX

_BRACKETS = re.compile(r"\[([^\]]*)\]")


@dataclass(frozen=True)
class RouteKnob:
    option: str  # "-conv_use_long_w", with its leading dash, as the route string spells it
    allowed: str  # "-conv_use_long_w=[on|off]"; unbounded knobs have no brackets, or "..." in them
    default: str
    help: str
    values: tuple[str, ...]  # the enumerable values; () for an unbounded knob

    @property
    def param(self) -> str:
        return param_name(self.option)


@dataclass(frozen=True)
class KnobDatabase:
    tuner_version: str
    knobs: tuple[RouteKnob, ...]

    def get(self, name: str) -> RouteKnob | None:
        """A knob by option ("-x", "x") or parameter name ("route/x")."""
        wanted = option_name(name)
        return next((k for k in self.knobs if k.option == wanted), None)


def param_name(option: str) -> str:
    """'-kgen:codegen:cuda_tile' -> 'route/kgen:codegen:cuda_tile'."""
    return ROUTE_PREFIX + option.lstrip("-")


def option_name(name: str) -> str:
    """'route/x', 'x' or '-x' -> '-x'."""
    if name.startswith(ROUTE_PREFIX):
        name = name[len(ROUTE_PREFIX):]
    return "-" + name.lstrip("-")


def allowed_values(allowed: str) -> tuple[str, ...]:
    """'-k=[0|1|2]' -> ('0', '1', '2'); '-k=int32_t' or '-k=[0|...|64]' -> () (not enumerable)."""
    m = _BRACKETS.search(allowed)
    if not m or "..." in m.group(1):
        return ()
    return tuple(v.strip() for v in m.group(1).split("|") if v.strip())


def parse_knob_database(text: str) -> KnobDatabase:
    """Parse all_build_routes JSON. An empty string (no tuner on this platform) gives an empty database;
    malformed JSON raises ValueError with one line."""
    if not text or not text.strip():
        return KnobDatabase("", ())
    try:
        root = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"all_build_routes is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(root, dict) or not isinstance(root.get("tuner_options"), list):
        raise ValueError("all_build_routes has no 'tuner_options' list")
    knobs = []
    for item in root["tuner_options"]:
        if not isinstance(item, dict) or not isinstance(item.get("option"), str) or not item["option"]:
            continue  # as trtexec does: entries without an option are skipped
        allowed = str(item.get("allowed_values", ""))
        knobs.append(RouteKnob(item["option"], allowed, str(item.get("default_value", "")),
                               str(item.get("help", "")), allowed_values(allowed)))
    return KnobDatabase(str(root.get("tuner_version", "")), tuple(knobs))


def space_parameters(db: KnobDatabase, include: Iterable[str] | None = None) -> tuple[dict[str, dict], list[str]]:
    """Space parameters for the enumerable knobs (all, or those named in `include`), and one line per
    knob left out (unknown name, or values that cannot be enumerated)."""
    wanted = [db.get(n) or n for n in include] if include is not None else list(db.knobs)
    params: dict[str, dict] = {}
    skipped: list[str] = []
    for knob in wanted:
        if isinstance(knob, str):
            skipped.append(f"{knob}: no such knob in the database (tuner {db.tuner_version})")
        elif not knob.values:
            skipped.append(f"{knob.option}: values not enumerable ({knob.allowed})")
        else:
            default = knob.default if knob.default in knob.values else knob.values[0]
            params[knob.param] = {"type": "categorical", "choices": list(knob.values), "default": default}
    return params, skipped


def route_string(config: dict[str, Any], db: KnobDatabase) -> tuple[str, list[str]]:
    """The build route of a config's route/ parameters: only knobs off their default, in database order.
    Returns (route, one line per route parameter dropped: unknown knob or disallowed value)."""
    chosen = {option_name(k): str(v) for k, v in config.items() if k.startswith(ROUTE_PREFIX)}
    dropped = []
    tokens = []
    for opt, value in chosen.items():
        knob = db.get(opt)
        if knob is None:
            dropped.append(f"{param_name(opt)}: this TensorRT's tuner ({db.tuner_version or 'none'}) has no knob {opt}; not set")
        elif knob.values and value not in knob.values:
            dropped.append(f"{param_name(opt)}={value}: not one of {list(knob.values)}; not set")
    order = {k.option: i for i, k in enumerate(db.knobs)}
    for opt in sorted((o for o in chosen if o in order), key=order.__getitem__):
        knob = db.knobs[order[opt]]
        if chosen[opt] != knob.default and (not knob.values or chosen[opt] in knob.values):
            tokens.append(f"{opt}={chosen[opt]}")
    return " ".join(tokens), dropped


def parse_route(route: str) -> dict[str, str]:
    """'-a=on -b=2' -> {'-a': 'on', '-b': '2'}; raises ValueError for a token without '='."""
    out = {}
    for token in route.split():
        opt, sep, value = token.partition("=")
        if not sep or not opt.startswith("-"):
            raise ValueError(f"build route token {token!r} is not -knob=value")
        out[opt] = value
    return out


def format_table(db: KnobDatabase, knob: str | None = None) -> str:
    """The database as a readable table (option, values, default, help); one knob when named."""
    knobs = list(db.knobs)
    if knob is not None:
        found = db.get(knob)
        if found is None:
            raise ValueError(f"no knob {option_name(knob)} in the database (tuner {db.tuner_version}); "
                             "list them all without a name")
        knobs = [found]
    lines = [f"tuner_version {db.tuner_version or '(none)'}: {len(db.knobs)} knobs"]
    for k in knobs:
        values = "[" + "|".join(k.values) + "]" if k.values else k.allowed.partition("=")[2] or "?"
        lines.append(f"  {k.option:<32} {values} default {k.default}")
        if k.help:
            lines.append(f"      {k.help}")
    return "\n".join(lines)


def format_json(db_text: str, knob: str | None = None) -> str:
    """Like `trtexec --helpBuildRoute[=knob]`: the JSON, or the one tuner_options entry of `knob`
    (matched without regard to the leading dash)."""
    root = json.loads(db_text)
    if knob is None:
        return json.dumps(root, indent=4)
    wanted = option_name(knob)
    for item in root.get("tuner_options", []):
        if isinstance(item, dict) and option_name(str(item.get("option", ""))) == wanted:
            return json.dumps(item, indent=4)
    raise ValueError(f"no knob {wanted} in the database; list them all without a name")


def format_yaml(params: dict[str, dict], db: KnobDatabase) -> str:
    """Space-file lines for route parameters, with each knob's help as a comment."""
    lines = [f"  # Global Performance Tuner knobs (tuner {db.tuner_version}); IBuilderConfig.build_route, TensorRT 11.1+"]
    for name, p in params.items():
        knob = db.get(name)
        if knob is not None and knob.help:
            lines.append(f"  # {knob.option}: {knob.help}")
        choices = ", ".join(json.dumps(c) for c in p["choices"])
        lines.append(f"  {json.dumps(name)}: {{type: categorical, choices: [{choices}], default: {json.dumps(p['default'])}}}")
    return "\n".join(lines)


def check_space_routes(params: Iterable[Any], db: KnobDatabase) -> list[str]:
    """One line per route/ parameter of a space (tuner.inputs.space.Param): searched as given, or what the
    installed TensorRT will drop at build time (unknown knob, values it does not allow)."""
    lines = []
    for p in params:
        if not p.name.startswith(ROUTE_PREFIX):
            continue
        knob = db.get(p.name)
        choices = [str(c) for c in (p.choices or [])]
        if knob is None:
            lines.append(f"{p.name}: no knob {option_name(p.name)} in this TensorRT's database "
                         f"(tuner {db.tuner_version or 'none'}); every trial drops it")
            continue
        bad = [c for c in choices if knob.values and c not in knob.values]
        default = (f", the space's default {p.default!s} is not TensorRT's {knob.default}"
                   if str(p.default) != knob.default else "")
        if bad:
            quote = " (quote them: YAML reads on/off/yes/no as booleans)" if {"True", "False"} & set(bad) else ""
            lines.append(f"{p.name}: {bad} not among {list(knob.values)}{quote}; trials choosing them drop the "
                         f"knob{default}")
        else:
            lines.append(f"{p.name}: searched over {choices}{default}")
    return lines or ["the space has no route/ parameters: no build-route knob is searched"]
