"""Accuracy metrics between candidate and reference outputs (Polygraphy-style named comparisons).

Every metric is an error: 0 is identical, larger is worse. Metrics are computed per output over all
validation batches; the aggregate of a metric is its worst output.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import UserError
from .metric_source import split_spec

Outputs = list[dict[str, np.ndarray]]  # one dict of output name -> array per batch


def _flat(outputs: Outputs, name: str) -> np.ndarray:
    return np.concatenate([np.asarray(o[name], np.float64).ravel() for o in outputs])


def _per_sample(outputs: Outputs, name: str) -> np.ndarray:
    """Rows = samples (leading axis of each batch output), columns = the rest flattened."""
    rows = []
    for o in outputs:
        a = np.asarray(o[name], np.float64)
        rows.append(a.reshape(a.shape[0], -1) if a.ndim > 1 else a.reshape(1, -1))
    return np.concatenate(rows)


@dataclass
class MetricContext:
    atol: float = 1e-5
    rtol: float = 1e-3


def _l0(y, r, ctx):
    return float(np.mean(np.abs(y - r) > ctx.atol + ctx.rtol * np.abs(r)))


def _l1(y, r, ctx):
    return float(np.mean(np.abs(y - r)))


def _l2(y, r, ctx):
    return float(np.mean((y - r) ** 2))


def _linf(y, r, ctx):
    return float(np.max(np.abs(y - r))) if y.size else 0.0


def _rel_l2(y, r, ctx):
    denom = np.linalg.norm(r)
    return float(np.linalg.norm(y - r) / denom) if denom > 0 else float(np.linalg.norm(y - r))


def _snr_db(y, r, ctx):
    # Reported as an error: the noise-to-signal ratio in dB (lower is better), i.e. -SNR.
    noise = np.sum((y - r) ** 2)
    signal = np.sum(r ** 2)
    if noise == 0:
        return -300.0
    return float(10 * np.log10(noise / max(signal, 1e-300)))


FLAT_METRICS: dict[str, Callable] = {"l0": _l0, "l1": _l1, "l2": _l2, "linf": _linf, "rel_l2": _rel_l2, "snr_db": _snr_db}


def _cos(ys, rs, ctx):
    """1 - cosine similarity, worst sample."""
    num = np.sum(ys * rs, axis=1)
    den = np.linalg.norm(ys, axis=1) * np.linalg.norm(rs, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        sim = np.where(den > 0, num / np.where(den > 0, den, 1), np.where(np.all(ys == rs, axis=1), 1.0, 0.0))
    return float(np.max(1.0 - sim))


def _top1(outputs, refs, name):
    y = np.concatenate([np.asarray(o[name]).reshape(-1, np.asarray(o[name]).shape[-1]) for o in outputs])
    r = np.concatenate([np.asarray(o[name]).reshape(-1, np.asarray(o[name]).shape[-1]) for o in refs])
    return float(np.mean(np.argmax(y, axis=-1) != np.argmax(r, axis=-1)))


BUILTIN_METRICS = sorted([*FLAT_METRICS, "cos", "top1"])
# The least value each built-in metric takes: a requirement below it can never hold (snr_db has none that matters).
METRIC_FLOOR = {m: 0.0 for m in BUILTIN_METRICS if m != "snr_db"}
# snr_db is negative-noise dB (e.g. -40 means 40 dB SNR); requirements on it read snr_db<=-30.


def compute_metrics(
    outputs: Outputs, refs: Outputs, atol: float = 1e-5, rtol: float = 1e-3
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Return (aggregate, per_output): aggregate[metric] is the worst output's value."""
    ctx = MetricContext(atol, rtol)
    per_output: dict[str, dict[str, float]] = {}
    for name in refs[0]:
        y, r = _flat(outputs, name), _flat(refs, name)
        vals = {m: fn(y, r, ctx) for m, fn in FLAT_METRICS.items()}
        if not np.all(np.isfinite(y)):
            vals = {m: float("inf") for m in vals}
        vals["cos"] = _cos(_per_sample(outputs, name), _per_sample(refs, name), ctx) if np.all(np.isfinite(y)) else float("inf")
        vals["top1"] = _top1(outputs, refs, name)
        per_output[name] = vals
    aggregate = {m: max(per_output[o][m] for o in per_output) for m in BUILTIN_METRICS}
    return aggregate, per_output


def load_user_metric(spec: str) -> Callable:
    """`module:function`; the function gets (outputs, refs, inputs) and returns an error (lower is better).
    The one place a user metric's module is imported: when the metric is computed, in the trial's child
    (parsing a requirement only reads its source: measure.metric_source)."""
    mod, fn = split_spec(spec)
    try:
        func = getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as exc:
        raise UserError(f"metric {spec!r}: cannot import it ({exc}); is the module on PYTHONPATH?") from None
    if not callable(func):
        raise UserError(f"metric {spec!r} is not a function")
    return func
