"""Whether a value read from storage has the shape a typed record declares: a study database is input too
(a hand edit, another tool, another engine-tuner version, anyone who can write a shared PostgreSQL)."""
from __future__ import annotations

import dataclasses
import types
from typing import Any, Union, get_args, get_origin, get_type_hints


def conforms(value: Any, hint: Any) -> bool:
    """value as JSON gives it back, against a type hint: float, int, str, bool, None, unions, dict[K, V],
    list[T], Any, or a dataclass (a mapping that holds its fields without defaults, each of its type; other
    keys are allowed: a newer version may add some)."""
    if hint is Any:
        return True
    if hint is None or hint is type(None):
        return value is None
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return any(conforms(value, a) for a in get_args(hint))
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is dict or hint is dict:
        of = get_args(hint)[1] if get_args(hint) else Any
        return isinstance(value, dict) and all(conforms(v, of) for v in value.values())
    if origin is list or hint is list:
        of = get_args(hint)[0] if get_args(hint) else Any
        return isinstance(value, list) and all(conforms(v, of) for v in value)
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            return False
        hints = get_type_hints(hint)
        needed = [f.name for f in dataclasses.fields(hint)
                  if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        return all(k in value for k in needed) and all(conforms(v, hints[k]) for k, v in value.items() if k in hints)
    return isinstance(value, hint)


def describe(hint: Any) -> str:
    """The hint in words, for a one-line error."""
    if dataclasses.is_dataclass(hint):
        needed = [f.name for f in dataclasses.fields(hint)
                  if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        return f"a mapping with {', '.join(needed)} ({hint.__name__})"
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(describe(a) for a in get_args(hint))
    if origin is dict or hint is dict:
        of = get_args(hint)[1] if get_args(hint) else Any
        return "a mapping" + ("" if of is Any else f" whose values are each {describe(of)}")
    if origin is list or hint is list:
        of = get_args(hint)[0] if get_args(hint) else Any
        return "a list" + ("" if of is Any else f" whose items are each {describe(of)}")
    return {float: "a number", int: "a whole number", str: "a string", bool: "true or false", type(None): "null",
            Any: "any value"}.get(hint, getattr(hint, "__name__", str(hint)))
