"""A space as this machine's backends can run it: unknown backends refused, a space's backend whose library
does not import here dropped (in a space over several) with a note, each backend's device adaptations
applied, and every parameter and route checked against the backends it is active with."""
from __future__ import annotations

import os
from dataclasses import replace

from ..backends.base import available_backends, get_backend, highest_opset, known_backends
from ..errors import UserError
from ..inputs.space import BACKEND, ROUTE_KEY, Space


def check_backends(space: Space, several_shapes: bool = False, throughput: bool = False) -> tuple[Space, list[str]]:
    """The space as this machine can run it, and notes for the user (one per dropped set).

    The space's backends must exist. In a space over several backends, a backend whose library does
    not import here is dropped from the `backend` choices with what depends on it; a space's only
    backend must import. Each backend's `adapt` hook then drops the choices its device
    cannot run. Every remaining parameter must be a setting of a backend it can be active with, and
    every route one that backend realises. several_shapes: the workload has several sets of shapes, so a
    choice that fixes the engine's shapes (Backend.fixes_shapes) is not offered."""
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
    if throughput:
        space = with_throughput_params(space, backends)
    if several_shapes:
        space, fixing = serving_every_shape(space, backends)
        notes += [f"{where}: {why} is not offered: the engine would serve only one set of the workload's shapes"
                  for why in fixing]
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


def with_throughput_params(space: Space, backends: dict) -> Space:
    """The space with each backend's throughput parameters (active under that backend in a space over several);
    a backend that cannot serve concurrent requests is refused in one line."""
    for name, backend in backends.items():
        if not backend.serves_concurrently:
            raise UserError(f"--throughput: backend {name} cannot time concurrent requests (its engines are not "
                            f"ServesConcurrently); measure latency, or give a space without it (--space)")
        for p in backend.throughput_params():
            if space.param(p.name) is None:
                when = {BACKEND: [name]} if space.param(BACKEND) is not None else {}
                space = replace(space, params=[*space.params, replace(p, when=when)])
    return space


def serving_every_shape(space: Space, backends: dict) -> tuple[Space, list[str]]:
    """The space without the choices under which an engine serves only one set of shapes (OpenVINO's
    static_shapes: true), asked of each backend a parameter is active with; and what each dropped choice is. A
    backend whose every value fixes them (TensorRT's one profile, which spans a workload) makes no choice here."""
    dropped = []
    for p in list(space.params):
        values = [False, True] if p.type == "bool" else list(p.choices or [])
        fixing: dict[str, str] = {}
        for b in (backends[n] for n in space.backends_of(p.when) if n in backends):
            reasons = {repr(v): b.fixes_shapes({p.key: v}) for v in values}
            if not all(reasons.values()):  # some values fix the shapes and some do not: a choice to drop
                fixing |= {v: why for v, why in reasons.items() if why}
        if not fixing:
            continue
        keep = [v for v in values if repr(v) not in fixing]
        default = p.default if p.default in keep else keep[0]
        space = space.with_param(p.name, replace(p, type="categorical", choices=keep, default=default))
        dropped += sorted(set(fixing.values()))
    return space, dropped


REFERENCE_BACKEND = "onnxruntime"  # computes the reference outputs (problem.reference) unless --ref-outputs


def check_opset(path: str, opset: int, space: Space, reference: bool) -> None:
    """Refuse, before anything is written, a model whose ai.onnx opset the runtimes here cannot read: the
    reference's (ONNX Runtime's, where the reference is computed) or every backend of the space. Else every
    trial would fail to build and the study would end with exit 3."""
    names = list(dict.fromkeys(([REFERENCE_BACKEND] if reference else []) + list(space.backends)))
    refusing = [n for n in names if not get_backend(n).reads_opset(opset)]
    reference_refuses = reference and REFERENCE_BACKEND in refusing
    if not reference_refuses and not all(n in refusing for n in space.backends):
        return  # a backend that cannot read it fails its trials; the search learns the route's failure
    maxima = {n: highest_opset(get_backend(n), opset) for n in refusing}
    lowest = min(maxima.values())
    who = " and ".join(f"{n} reads up to opset {m}" for n, m in maxima.items())
    why = " (it computes the reference outputs)" if reference_refuses else ""
    raise UserError(f"{path}: the model is opset {opset}, but {who} here{why}; export it at opset {lowest} or "
                    f"lower (torch.onnx.export(..., opset_version={lowest}))")
