"""Validation and calibration inputs: .npz files or synthetic data from the input specs."""
from __future__ import annotations

import hashlib

import numpy as np
import psutil

from ..errors import UserError
from .model import TensorSpec, shape_text
from .user_paths import check_input_file

Batch = dict[str, np.ndarray]


def parse_int_ranges(items: list[str] | None) -> dict[str, tuple[int, int]]:
    """`["input_ids=0:30522"]` -> {"input_ids": (0, 30522)} (high exclusive)."""
    ranges = {}
    for item in items or []:
        name, sep, rng = item.partition("=")
        lo, sep2, hi = rng.partition(":")
        try:
            if not (sep and sep2 and name):
                raise ValueError
            lo_i, hi_i = int(lo), int(hi)
            if hi_i <= lo_i:
                raise ValueError
        except ValueError:
            raise UserError(f"--int-range {item!r}: expected NAME=LOW:HIGH with LOW < HIGH, e.g. input_ids=0:30522") from None
        ranges[name] = (lo_i, hi_i)
    return ranges


def check_int_ranges(ranges: dict[str, tuple[int, int]], specs: list[TensorSpec]) -> dict[str, tuple[int, int]]:
    """Each --int-range names an integer input of the model (floats are drawn standard normal)."""
    by_name = {s.name: s for s in specs}
    for name, (lo, hi) in ranges.items():
        spec = by_name.get(name)
        if spec is None:
            raise UserError(f"--int-range {name}={lo}:{hi}: the model has no input {name!r}; its inputs are {sorted(by_name)}")
        if not np.issubdtype(spec.dtype, np.integer):
            raise UserError(f"--int-range {name}={lo}:{hi}: input {name!r} is {np.dtype(spec.dtype)}, not an integer "
                            "input (synthetic floats are standard normal); give real inputs with --data FILE.npz")
    return ranges


def _check_fits_in_memory(specs: list[TensorSpec], shapes: dict[str, tuple[int, ...]], n_batches: int,
                          available: int | None = None) -> None:
    """Inputs that would take more than half the free memory are a mistyped --shape, not a study: say so
    before numpy fails to allocate them (floats are drawn as float64 first)."""
    need = n_batches * sum(int(np.prod(shapes[s.name], dtype=np.float64)) * max(8, np.dtype(s.dtype).itemsize)
                           for s in specs)
    available = psutil.virtual_memory().available if available is None else available
    if need > available / 2:
        given = ", ".join(f"{s.name}={shape_text(shapes[s.name])}" for s in specs)
        raise UserError(f"the inputs {given} need {need / 2**30:.3g} GiB for {n_batches} batches, more than half the "
                        f"free memory ({available / 2**30:.3g} GiB); check --shape")


def synthetic_batches(
    specs: list[TensorSpec],
    shapes: dict[str, tuple[int, ...]],
    n_batches: int,
    int_ranges: dict[str, tuple[int, int]] | None = None,
    seed: int = 0,
) -> list[Batch]:
    """Seeded inputs: floats standard normal; integers uniform in the user's range (required)."""
    int_ranges = int_ranges or {}
    _check_fits_in_memory(specs, shapes, n_batches)
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(n_batches):
        batch = {}
        for spec in specs:
            shape = shapes[spec.name]
            if np.issubdtype(spec.dtype, np.floating):
                batch[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
            elif spec.dtype == np.bool_:
                batch[spec.name] = rng.integers(0, 2, shape).astype(np.bool_)
            elif np.issubdtype(spec.dtype, np.integer):
                if spec.name not in int_ranges:
                    raise UserError(
                        f"integer input {spec.name!r} needs a value range for synthetic data: "
                        f"pass --int-range {spec.name}=LOW:HIGH (or --data FILE.npz)"
                    )
                lo, hi = int_ranges[spec.name]
                batch[spec.name] = rng.integers(lo, hi, shape).astype(spec.dtype)
            else:
                raise UserError(f"input {spec.name!r} has dtype {spec.dtype}; pass real inputs with --data FILE.npz")
        batches.append(batch)
    return batches


def read_npz(path: str, kind: str, hint: str, flag: str = "") -> dict[str, np.ndarray]:
    """Every array of the .npz a user names (no pickles), for --data, --calib-data and --ref-outputs: a missing
    file or one numpy cannot read is a UserError (kind, hint: check_input_file's; flag: the message's prefix)."""
    check_input_file(path, kind, hint)
    try:
        npz = np.load(path, allow_pickle=False)
        return {k: npz[k] for k in npz.files}
    except Exception as exc:  # noqa: BLE001  whatever numpy makes of a file that is not an .npz
        raise UserError(f"{flag + ' ' if flag else ''}{path}: not a readable .npz file ({type(exc).__name__})") from None


def nonfinite_count(arr: np.ndarray) -> int:
    """How many of a float array's values are NaN or infinite; 0 for other dtypes."""
    if not np.issubdtype(arr.dtype, np.floating):
        return 0
    return int(arr.size - np.count_nonzero(np.isfinite(arr)))


def load_npz_batches(path: str, specs: list[TensorSpec]) -> list[Batch]:
    """An .npz with one array per input name; a leading axis of batches (arrays [B, *input_shape])."""
    arrays = read_npz(path, "data", "pass an .npz with one array per model input")
    counts = set()
    for spec in specs:
        if spec.name not in arrays:
            raise UserError(f"{path}: no array for input {spec.name!r}; the file has {sorted(arrays)}")
        arr = arrays[spec.name]
        if arr.dtype != spec.dtype:
            raise UserError(f"{path}: input {spec.name!r} has dtype {arr.dtype}, the model wants {np.dtype(spec.dtype)}")
        if arr.ndim != len(spec.shape) + 1 or any(
            isinstance(d, int) and d != s for d, s in zip(spec.shape, arr.shape[1:])
        ):
            raise UserError(
                f"{path}: input {spec.name!r} has shape {list(arr.shape)}; expected [n_batches] + {list(spec.shape)}"
            )
        if bad := nonfinite_count(arr):
            raise UserError(f"{path}: input {spec.name!r} has {bad} NaN or infinite values of {arr.size}; accuracy "
                            f"against such inputs means nothing: give finite inputs")
        counts.add(arr.shape[0])
    if len(counts) != 1 or 0 in counts:
        raise UserError(f"{path}: every input needs the same, non-zero number of batches (leading axis); got {sorted(counts)}")
    n = counts.pop()
    return [{s.name: arrays[s.name][i] for s in specs} for i in range(n)]


def batches_hash(batches: list[Batch]) -> str:
    h = hashlib.sha256()
    for batch in batches:
        for name in sorted(batch):
            arr = np.ascontiguousarray(batch[name])
            h.update(name.encode())
            h.update(str(arr.dtype).encode())
            h.update(str(arr.shape).encode())
            h.update(arr.tobytes())
    return h.hexdigest()[:16]


REFS_MARK = "-r"  # a study's data hash, then this, then its reference outputs' hash (--ref-outputs)


def refs_hash(refs: list[Batch]) -> str:
    """The short hash of reference outputs that a study's data hash ends in."""
    return batches_hash(refs)[:8]


def with_refs(data_hash: str, refs: list[Batch]) -> str:
    """The data hash of a problem whose reference outputs are given: they are part of its data."""
    return data_hash + REFS_MARK + refs_hash(refs)


def refs_part(data_hash: str) -> str | None:
    """The reference outputs' hash in a study's data hash; None for a study made without them."""
    return data_hash.rpartition(REFS_MARK)[2] if REFS_MARK in data_hash else None


def save_npz_batches(path: str, batches: list[Batch]) -> None:
    names = list(batches[0])
    np.savez(path, **{n: np.stack([b[n] for b in batches]) for n in names})
