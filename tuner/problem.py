"""The problem a study tunes: model, validation and calibration data, space, accuracy requirement.

Loading validates every user input before anything is written (bad files, shapes, space fields,
requirements and backends get one line each). Nothing here builds or times an engine.
"""
from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from . import data as data_mod
from .backends.base import available_backends, get_backend, known_backends
from .errors import UserError
from .measure.requirement import Requirement
from .model import ModelFile, TensorSpec, input_specs, load_model, model_hash, parse_shape_profile, resolve_shapes
from .space import BACKEND, ROUTE_KEY, Space, defaults_chooser, load_space, normalize, parse_set, trial_params


@dataclass
class ProblemSpec:
    """What defines a problem, as given by the user: JSON-able, stored in a study, sent to child processes."""

    model_path: str
    space_path: str | None = None
    data: str | None = None
    calib_data: str | None = None
    shapes: list[str] | None = None
    int_ranges: list[str] | None = None
    require: str | None = None
    n_batches: int = 4
    n_calib: int = 4

    def load(self) -> "Problem":
        return load_problem(**asdict(self))


@dataclass
class Problem:
    """Everything fixed across trials. `refs` (the reference outputs) are filled in by the evaluator."""

    spec: ProblemSpec
    model: ModelFile
    space: Space
    batches: list
    calib: list
    data_hash: str
    requirement: Requirement
    shapes: dict[str, tuple[int, ...]]
    notes: list[str] = field(default_factory=list)  # things the user should know, said once
    refs: list | None = None

    @property
    def model_path(self) -> str:
        return self.model.path

    @property
    def model_hash(self) -> str:
        return self.model.hash

    @property
    def graph_nodes(self) -> list[tuple[str, str]]:
        return self.model.nodes

    @property
    def calib_key(self) -> str:
        """Names the cached calibration ranges. The model is part of it: two models fed the same
        inputs (ResNet-18 and MobileNetV3 at 1x3x224x224) have different tensors to range."""
        return f"{self.model_hash}-{self.data_hash}"


def load_problem(model_path: str, space_path: str | None = None, data: str | None = None, calib_data: str | None = None,
                 shapes: list[str] | None = None, int_ranges: list[str] | None = None, require: Any = None,
                 n_batches: int = 4, n_calib: int = 4) -> Problem:
    spec = ProblemSpec(model_path, space_path, data, calib_data, shapes, int_ranges,
                       require if isinstance(require, (str, type(None))) else ",".join(require), n_batches, n_calib)
    requirement = Requirement.parse(require)
    space, notes = check_backends(load_space(space_path))
    proto = load_model(model_path)
    specs = input_specs(proto)
    profile = parse_shape_profile(shapes)
    ranges = data_mod.check_int_ranges(data_mod.parse_int_ranges(int_ranges), specs)
    if data:
        batches = data_mod.load_npz_batches(data, specs)
        concrete = {k: tuple(v.shape) for k, v in batches[0].items()}
    else:
        concrete = resolve_shapes(specs, profile)
        batches = data_mod.synthetic_batches(specs, concrete, n_batches, ranges)
    calib = data_mod.load_npz_batches(calib_data, specs) if calib_data else batches[:n_calib]
    data_hash = data_mod.batches_hash(batches) + data_mod.batches_hash(calib)[:8]
    notes += problem_notes(requirement, data, specs, ranges)
    return Problem(spec, ModelFile(model_path, proto, model_hash(model_path)), space, batches, calib, data_hash,
                   requirement, concrete, notes)


def problem_notes(requirement: Requirement, data: str | None, specs: list[TensorSpec],
                  ranges: dict[str, tuple[int, int]]) -> list[str]:
    """What makes a study's results mean less than they seem, said once by every command that loads it."""
    notes = []
    if not requirement.bounds:
        notes.append("no --require: every trial counts as feasible, so the winner is just the fastest engine "
                     "whatever its error (add e.g. --require 'cos<=0.005')")
    if not data:
        kinds = []
        for s in specs:
            if np.issubdtype(s.dtype, np.floating):
                kinds.append(f"{s.name}: standard normal")
            elif s.dtype == np.bool_:
                kinds.append(f"{s.name}: random booleans")
            elif s.name in ranges:
                kinds.append(f"{s.name}: uniform integers in [{ranges[s.name][0]}, {ranges[s.name][1]}) from --int-range")
        notes.append(f"no --data: accuracy is measured on synthetic inputs ({'; '.join(kinds)}), which says little "
                     "about a real task; give real inputs with --data FILE.npz")
    return notes


def print_notes(notes: list[str]) -> None:
    """The problem's notes, as every command says them: once, on stderr."""
    for note in notes:
        print(f"note: {note}", file=sys.stderr)


def check_backends(space: Space) -> tuple[Space, list[str]]:
    """The space as this machine can run it, and notes for the user (one per dropped set).

    The space's backends must exist. In a space over several backends, a backend whose library does
    not import here is dropped from the `backend` choices with what depends on it; a space's only
    backend must import. Each backend's optional `adapt` hook then drops the choices its device
    cannot run. Every remaining parameter must be a setting of a backend it can be active with, and
    every route one that backend realises."""
    names = space.backends
    unknown = [n for n in names if n not in known_backends()]
    if unknown:
        raise UserError(f"{space.path}: backend {unknown[0]!r} is unknown; known backends: {', '.join(known_backends())}")
    usable = available_backends(names)
    if not usable:
        get_backend(names[0])  # raises the one line that says what to install
    notes: list[str] = []
    where = os.path.basename(space.path)
    if len(usable) < len(names):
        chooser = space.param(BACKEND)
        for name in names:
            if name not in usable:
                try:
                    get_backend(name)
                except UserError as exc:
                    notes.append(f"{where}: the {name} choices are left out: {exc}")
        space = space.with_param(BACKEND, replace(chooser, choices=usable, default=chooser.default
                                                  if chooser.default in usable else usable[0]))
    backends = {n: get_backend(n) for n in usable}
    for name, backend in backends.items():
        for p in list(space.params):
            if p.name == BACKEND or space.param(p.name) is None or name not in space.backends_of(p.when):
                continue
            new, reason = backend.adapt(space.param(p.name))
            space = space.with_param(p.name, new)
            if reason:
                notes.append(f"{where}: {name} on this device: {reason}")
    for p in space.params:
        if p.name == BACKEND:
            continue
        mine = [backends[n] for n in space.backends_of(p.when)]
        if not any(b.knows(p.key) for b in mine):
            why = "; ".join(w for w in (b.why_unknown(p.key) for b in mine) if w)
            raise UserError(f"{space.path}: parameters.{p.name}: no backend of this space ({', '.join(b.name for b in mine)}) "
                            f"has such a setting{f' ({why})' if why else ''}; check the spelling "
                            "(tuner space MODEL lists a space's parameters)")
        if p.key == ROUTE_KEY:
            routes = sorted({r for b in mine for r in b.routes})
            bad = [c for c in p.choices or [] if c not in routes]
            if bad:
                raise UserError(f"{space.path}: parameters.{p.name}: unknown route {bad[0]!r}; "
                                f"the routes are {', '.join(routes)}")
    return space, notes


def config_from_sets(problem: Problem, sets: list[str] | None) -> dict:
    """The config of `--set key=value ...`, every other parameter at its default. A value for a
    parameter whose condition does not hold (ov_precision without backend=openvino) is refused."""
    values = parse_set(sets, problem.space)
    asked = trial_params(problem.space, defaults_chooser(values), problem.graph_nodes)
    for name in values:
        p = problem.space.param(name)
        if p is not None and name not in asked:
            raise UserError(f"--set {name}: inactive here, it applies when {p.when}; set those too")
    return normalize(problem.space, defaults_chooser(values), problem.graph_nodes)
