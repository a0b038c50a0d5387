"""Load and inspect ONNX models: input specs, shape profiles, opset upgrades, content hash."""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from ..errors import UserError
from .user_paths import check_input_file


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: np.dtype
    shape: tuple  # ints or dimension names (str) or None for unknown

    @property
    def is_dynamic(self) -> bool:
        return any(not isinstance(d, int) for d in self.shape)


@dataclass
class ModelFile:
    """The model a study tunes: its file (compilers that read files read it) and the loaded proto."""

    path: str
    proto: onnx.ModelProto  # loaded with external data
    hash: str

    @property
    def nodes(self) -> list[tuple[str, str]]:
        """(node name, op type) of the main graph: what per-layer parameters are made of."""
        return [(n.name, n.op_type) for n in self.proto.graph.node]


def _missing_external_data(path: str, data_file: str) -> UserError:
    return UserError(f"{path}: its external data file {data_file} is missing; keep the model's weight files next "
                     f"to it, as they were exported")


def load_model(path: str, check: bool = True) -> onnx.ModelProto:
    """Load an ONNX model (external data too) and run the checker; user errors name the file.
    check=False: a process that trusts its parent's check (tuner.problem.spec.ProblemSpec.model_hash)."""
    check_input_file(path, "model", "pass the path of an .onnx file")
    try:
        model = onnx.load(path, load_external_data=True)
    except Exception as exc:  # onnx raises DecodeError and friends for non-ONNX files
        missing = re.search(r"should be stored in (.+?), but", str(exc))  # the model is there, its weights file not
        if missing:
            raise _missing_external_data(path, missing.group(1)) from None
        raise UserError(f"{path}: not an ONNX model ({type(exc).__name__}); pass an .onnx file") from None
    if not model.graph.node:
        raise UserError(f"{path}: not an ONNX model (no graph nodes); pass an .onnx file")
    try:
        if check:
            onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0]
        raise UserError(f"{path}: fails the ONNX checker: {first}") from None
    if check:
        _check_op_domains(path, model)
    return model


# Op domains the runtimes implement; the checker accepts any other domain unchecked, and every build then fails.
KNOWN_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "com.microsoft")


def _check_op_domains(path: str, model: onnx.ModelProto) -> None:
    local = {(f.domain, f.name) for f in model.functions}  # functions the model defines itself
    for node in model.graph.node:
        if node.domain not in KNOWN_DOMAINS and (node.domain, node.op_type) not in local:
            raise UserError(f"{path}: node {node.name or node.op_type!r} is op {node.op_type} of domain {node.domain!r}, "
                            f"which no backend implements (known domains: ai.onnx, ai.onnx.ml, com.microsoft); "
                            f"export the model with standard ops")


def _value_spec(value: onnx.ValueInfoProto) -> TensorSpec:
    ttype = value.type.tensor_type
    dims = []
    for d in ttype.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        else:
            dims.append(d.dim_param or None)
    return TensorSpec(value.name, helper.tensor_dtype_to_np_dtype(ttype.elem_type), tuple(dims))


def input_specs(model: onnx.ModelProto) -> list[TensorSpec]:
    """Graph inputs that are not initializers (older exports list weights as inputs too)."""
    inits = {i.name for i in model.graph.initializer}
    return [_value_spec(v) for v in model.graph.input if v.name not in inits]


def output_specs(model: onnx.ModelProto) -> list[TensorSpec]:
    return [_value_spec(v) for v in model.graph.output]


def _foreign_shape_hint(item: str) -> str | None:
    """trtexec's `x:8x64x256` (comma-separated for several) and Polygraphy's `x:[8,64,256]`, in this tool's syntax."""
    fixed = []
    for part in re.split(r",(?![^\[]*\])", item):  # commas inside [...] belong to a Polygraphy shape
        m = re.fullmatch(r"\s*([^=:\s]+):\s*(?:\[([\d,\s]+)\]|(\d+(?:x\d+)*))\s*", part)
        if not m:
            return None
        dims = [d.strip() for d in m.group(2).split(",")] if m.group(2) else m.group(3).split("x")
        fixed.append(f"--shape {m.group(1)}={'x'.join(dims)}")
    return " ".join(fixed)


def shape_text(shape) -> str:
    """A shape as --shape writes it: 8x128."""
    return "x".join(map(str, shape))


def parse_shape_profile(items: list[str] | None) -> dict[str, tuple[int, ...]]:
    """`["input_ids=8x128", ...]` -> {"input_ids": (8, 128)}."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items or []:
        hint = _foreign_shape_hint(item) if "=" not in item else None
        if hint:
            raise UserError(f"--shape {item!r}: NAME:DIMS is trtexec's and Polygraphy's syntax; here it is {hint}")
        name, sep, dims = item.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            shape = tuple(int(d) for d in dims.lower().split("x"))
            if any(d <= 0 for d in shape):
                raise ValueError
        except ValueError:
            raise UserError(f"--shape {item!r}: expected NAME=DIMxDIM..., e.g. input_ids=8x128") from None
        shapes[name] = shape
    return shapes


def check_shapes_match_data(profile: dict[str, tuple[int, ...]], data_shapes: dict[str, tuple[int, ...]],
                             data_path: str) -> None:
    """With --data the data's shapes are the shapes: a --shape that says otherwise is a mistake, not ignored."""
    for name, shape in profile.items():
        if name not in data_shapes:
            raise UserError(f"--shape names unknown input {name!r}; the model's inputs are {sorted(data_shapes)}")
        if tuple(shape) != tuple(data_shapes[name]):
            raise UserError(f"--shape {name}={shape_text(shape)} contradicts --data {data_path}, whose {name} "
                            f"batches are {shape_text(data_shapes[name])}; drop --shape (the data's shapes "
                            f"are used)")


def resolve_shapes(specs: list[TensorSpec], profile: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """A concrete shape per input: the profile's where given, else the static shape."""
    names = {s.name for s in specs}
    unknown = sorted(set(profile) - names)
    if unknown:
        raise UserError(f"--shape names unknown input(s) {unknown}; the model's inputs are {sorted(names)}")
    shapes = {}
    for spec in specs:
        if spec.name in profile:
            shape = profile[spec.name]
            if len(shape) != len(spec.shape) or any(
                isinstance(d, int) and d != s for d, s in zip(spec.shape, shape)
            ):
                raise UserError(
                    f"--shape {spec.name}={shape_text(shape)} does not fit the model's shape {list(spec.shape)}"
                )
            shapes[spec.name] = shape
        elif spec.is_dynamic:
            example = "x".join(str(d) if isinstance(d, int) else "N" for d in spec.shape)
            raise UserError(
                f"input {spec.name!r} has dynamic dimensions {list(spec.shape)}; "
                f"give a shape profile, e.g. --shape {spec.name}={example}"
            )
        else:
            shapes[spec.name] = tuple(spec.shape)
    return shapes


def default_opset(model: onnx.ModelProto) -> int:
    for op in model.opset_import:
        if op.domain in ("", "ai.onnx"):
            return op.version
    return 0


def ensure_opset(model: onnx.ModelProto, minimum: int) -> onnx.ModelProto:
    """Return the model converted to at least `minimum` (per-channel QDQ needs opset >= 13)."""
    if default_opset(model) >= minimum:
        return model
    from onnx import version_converter

    try:
        return version_converter.convert_version(model, minimum)
    except Exception as exc:
        raise RuntimeError(f"could not upgrade the model from opset {default_opset(model)} to {minimum}: {exc}") from exc


def model_hash(path: str) -> str:
    """Content hash of the model file and its external data files (sha256, first 16 hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as exc:  # noqa: BLE001  same refusal as load_model
        raise UserError(f"{path}: not an ONNX model ({type(exc).__name__}); pass an .onnx file") from None
    base = os.path.dirname(os.path.abspath(path))
    locations = sorted(
        {e.value for t in model.graph.initializer for e in t.external_data if e.key == "location"}
    )
    for loc in locations:
        if not os.path.isfile(os.path.join(base, loc)):
            raise _missing_external_data(path, os.path.join(base, loc))
        with open(os.path.join(base, loc), "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:16]


def save_model(model: onnx.ModelProto, path: str) -> None:
    """Save, moving weights to external data when the proto would pass protobuf's 2 GB limit."""
    large = model.ByteSize() > 1_800_000_000
    onnx.save(model, path, save_as_external_data=large, location=os.path.basename(path) + ".data" if large else None)


def constants_to_initializers(model: onnx.ModelProto) -> int:
    """Turn the main graph's tensor-valued Constant nodes into initializers, in place; returns how many."""
    keep, moved = [], 0
    for node in model.graph.node:
        if node.op_type == "Constant" and len(node.attribute) == 1 and node.attribute[0].name == "value":
            tensor = onnx.TensorProto()
            tensor.CopyFrom(node.attribute[0].t)
            tensor.name = node.output[0]
            model.graph.initializer.append(tensor)
            moved += 1
        else:
            keep.append(node)
    if moved:
        del model.graph.node[:]
        model.graph.node.extend(keep)
    return moved


# The ops whose time a runtime's fused node carries first, when it holds several model nodes.
HEAVY_OPS = ("MatMul", "Gemm", "Conv", "ConvTranspose")


def consumers_of(proto: onnx.ModelProto) -> dict[str, list[str]]:
    """Model node name -> the names of the nodes that read its outputs (the main graph)."""
    producers = {o: n.name for n in proto.graph.node for o in n.output}
    out: dict[str, list[str]] = {}
    for n in proto.graph.node:
        for i in n.input:
            if i in producers:
                out.setdefault(producers[i], []).append(n.name)
    return out


def owning_consumer(name: str, consumers: dict[str, list[str]], owner: dict[str, object]) -> str | None:
    """The first node downstream of `name` (breadth first) that `owner` knows: where a runtime put a node it
    fused away and named after no model node (OpenVINO's fp32 FullyConnected is named after the bias Add)."""
    todo, seen = list(consumers.get(name, [])), set()
    while todo:
        c = todo.pop(0)
        if c in seen:
            continue
        seen.add(c)
        if c in owner:
            return c
        todo.extend(consumers.get(c, []))
    return None
