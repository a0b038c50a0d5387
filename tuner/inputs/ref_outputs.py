"""Reference outputs given by the user (--ref-outputs FILE.npz): the training framework's own outputs of the
validation batches (trtexec --loadRefOutputs, Polygraphy's saved outputs), compared to instead of ONNX
Runtime's fp32 run. Checked when the problem loads: one line per thing wrong with the file."""
from __future__ import annotations

import numpy as np

from ..errors import UserError
from .data import Batch, nonfinite_count, read_npz
from .model import TensorSpec

FLAG = "--ref-outputs"


def _symbols(inputs: list[TensorSpec], shapes: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """A named dynamic dimension of the inputs ("batch") -> its size in the validation data."""
    out: dict[str, int] = {}
    for spec in inputs:
        for dim, size in zip(spec.shape, shapes.get(spec.name, ())):
            if isinstance(dim, str) and dim:
                out.setdefault(dim, int(size))
    return out


def _expected(spec: TensorSpec, symbols: dict[str, int]) -> list:
    """The output's shape per batch as far as the model says it: ints, or None where it cannot tell."""
    return [d if isinstance(d, int) else symbols.get(d) if isinstance(d, str) else None for d in spec.shape]


def load_ref_outputs(path: str, outputs: list[TensorSpec], inputs: list[TensorSpec],
                     shapes: dict[str, tuple[int, ...]], n_batches: int) -> list[Batch]:
    """The file as one dict of output name -> array per validation batch. The file holds one array per model
    output, leading axis = batches (the --data file's count), the rest the output's shape, of the output's
    dtype, finite; arrays for other names are ignored."""
    arrays = read_npz(path, "reference outputs", "pass an .npz with one array per model output, leading axis = batches",
                      FLAG)
    symbols = _symbols(inputs, shapes)
    for spec in outputs:
        if spec.name not in arrays:
            raise UserError(f"{FLAG} {path}: no array for model output {spec.name!r}; the file has {sorted(arrays)} "
                            f"(one array per output, named as the model's outputs: {[o.name for o in outputs]})")
        arr = arrays[spec.name]
        if arr.dtype != spec.dtype:
            raise UserError(f"{FLAG} {path}: output {spec.name!r} has dtype {arr.dtype}, the model gives "
                            f"{np.dtype(spec.dtype)}")
        want = _expected(spec, symbols)
        if arr.ndim != len(want) + 1 or any(w is not None and w != s for w, s in zip(want, arr.shape[1:])):
            shown = [w if w is not None else (d or "?") for w, d in zip(want, spec.shape)]
            raise UserError(f"{FLAG} {path}: output {spec.name!r} has shape {list(arr.shape)}; expected [n_batches] + "
                            f"{shown} (the model's output for --data's batches)")
        if arr.shape[0] != n_batches:
            raise UserError(f"{FLAG} {path}: output {spec.name!r} has {arr.shape[0]} batches (leading axis), --data has "
                            f"{n_batches}; give the outputs of the same validation batches, in order")
        if bad := nonfinite_count(arr):
            raise UserError(f"{FLAG} {path}: output {spec.name!r} has {bad} NaN or infinite values of {arr.size}; "
                            "errors against such a reference mean nothing: give finite outputs")
    return [{s.name: arrays[s.name][i] for s in outputs} for i in range(n_batches)]


def check_against_engine(outputs: Batch, refs: Batch, path: str) -> None:
    """The first batch an engine computed has the shapes of the file's: a dimension the model leaves open and
    the inputs do not name (checked on loading) can only be checked here."""
    for name, ref in refs.items():
        got = outputs.get(name)
        if got is not None and np.shape(got) != np.shape(ref):
            raise UserError(f"{FLAG} {path}: output {name!r} has shape {list(np.shape(ref))} per batch, the engine "
                            f"computes {list(np.shape(got))} from --data's batches; give the outputs of these inputs")
