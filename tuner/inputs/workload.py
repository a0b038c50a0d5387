"""A workload: the input shapes a model serves, each with its share of the requests (`--shape` with `@WEIGHT`).

Without a weight anywhere, the --shape items are one set, as before: `--shape input_ids=8x128 --shape
attention_mask=8x128`. With weights, each item is one set of the workload and names every dynamic input,
commas between inputs: `--shape input_ids=1x16,attention_mask=1x16@0.7 --shape input_ids=32x128,attention_mask=32x128@0.3`.
Weights are shares (normalized to sum 1). With --data, each set's batches are cut from the data's (the leading
part of every dimension, so a sequence is cut with its mask and an image cropped): no set may be larger than the
data in any dimension."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import UserError
from .model import parse_shape_profile, shape_text

Batch = dict[str, np.ndarray]


@dataclass(frozen=True)
class ShapeSet:
    """One set of the workload as given: {input: dims} for the inputs it names, and its share of the requests."""

    shapes: dict[str, tuple[int, ...]]
    weight: float = 1.0


def parse_workload(items: list[str] | None) -> list[ShapeSet]:
    """--shape items -> the workload's sets ([] without --shape; one set without weights)."""
    items = list(items or [])
    weighted = [i for i in items if "@" in i]
    if not weighted:
        names = [i.partition("=")[0] for i in items]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise UserError(f"--shape names input {twice[0]!r} twice; for a workload of several shapes give each set "
                            f"a weight, e.g. --shape {twice[0]}=1x16@0.7 --shape {twice[0]}=32x128@0.3")
        return [ShapeSet(parse_shape_profile(items))] if items else []
    if len(weighted) < len(items):
        plain = next(i for i in items if "@" not in i)
        raise UserError(f"--shape {plain!r} has no @WEIGHT while others have one; in a workload every set has a weight "
                        "and names every dynamic input, e.g. --shape ids=1x16,mask=1x16@0.7")
    sets = [_one_set(item) for item in items]
    first = sorted(sets[0].shapes)
    for item, s in zip(items, sets):
        if sorted(s.shapes) != first:
            raise UserError(f"--shape {item!r} names {', '.join(sorted(s.shapes))}, but {items[0]!r} names "
                            f"{', '.join(first)}; every set of a workload names the same inputs")
    seen = set()
    for item, s in zip(items, sets):
        key = tuple(sorted(s.shapes.items()))
        if key in seen:
            raise UserError(f"--shape {item!r}: the workload has this set twice; give it once with the sum of the weights")
        seen.add(key)
    return sets


def _one_set(item: str) -> ShapeSet:
    body, _, weight_text = item.rpartition("@")
    try:
        weight = float(weight_text)
    except ValueError:
        weight = float("nan")
    if not math.isfinite(weight) or weight <= 0:
        raise UserError(f"--shape {item!r}: the weight after @ must be a positive number, e.g. {body}@0.5")
    parts = [p for p in body.split(",") if p.strip()]
    names = [p.partition("=")[0] for p in parts]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UserError(f"--shape {item!r} names input {twice[0]!r} twice; one set names each input once")
    return ShapeSet(parse_shape_profile(parts), weight)


def weights(sets: list[ShapeSet]) -> list[float]:
    """Each set's share of the requests (summing to 1)."""
    total = sum(s.weight for s in sets)
    return [s.weight / total for s in sets]


def set_label(shapes: dict[str, tuple[int, ...]]) -> str:
    """A set of shapes as --shape writes it: input_ids=1x16,attention_mask=1x16."""
    return ",".join(f"{n}={shape_text(s)}" for n, s in shapes.items())


def cut_batches(batches: list[Batch], shapes: dict[str, tuple[int, ...]], data_path: str) -> list[Batch]:
    """The data's batches cut to `shapes` (the leading part of every dimension): a sequence and its mask keep their
    first tokens, an image its top-left crop. A dimension larger than the data's cannot be made from it."""
    first = batches[0]
    for name, shape in shapes.items():
        have = first[name].shape
        if len(shape) != len(have) or any(s > h for s, h in zip(shape, have)):
            raise UserError(f"--shape {name}={shape_text(shape)}: --data {data_path} has {name} batches of "
                            f"{shape_text(have)}, and a workload's shapes are cut from the data's, so none may be "
                            f"larger; give data at the largest shape of the workload")
    return [{k: (v[tuple(slice(0, d) for d in shapes[k])] if k in shapes else v) for k, v in b.items()}
            for b in batches]
