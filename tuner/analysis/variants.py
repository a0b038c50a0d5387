"""Route variants: before layers are ranked, the all-quantized engine of each accuracy-relevant option set
of a quantizing route (NNCF model type, SmoothQuant, preset, overflow fix; ONNX Runtime per-channel,
reduce-range, op types, calibration method), each with its error and a quick latency, and the variant
the layers are then ranked for.

The option sets come from the backend (`route_variants(route, attention)`, attention: the graph has a Softmax
and a MatMul, so a transformer's options are built and measured too), are kept where the space
offers them (a variant the study's trials cannot build is left out), and carry the settings an expert
gives a quantized engine where the space offers them (the backend's `quantized_settings`: OpenVINO's bf16
for the float parts, static shapes). Each build goes through the isolated evaluator and is timed in turn with the fp32
engine (its ratio chooses the variant); one that fails is a row with its reason, never the end of the
analysis. Measured rows are cached as they come (per model, data, route and
variant list), so a killed analysis loses at most one build.
"""
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict

from ..backends.base import backend_versions, get_backend
from ..errors import TrialFailure
from ..execute.jobs import Evaluator
from ..inputs.attention import may_have_attention
from ..inputs.configs import override_active
from ..inputs.space import BACKEND, ROUTE_KEY, LayerOverride
from ..measure.latency import LatencyProtocol
from ..problem.spec import Problem
from ..store import cache
from .quantizing import fp32_config, route_setup

# A variant more than this much slower than the fastest one is "clearly slower": its lower error does not
# make it the one to rank layers for. Generous, as the variants of a route differ by 5-15% in speed, and a
# variant with the lower error is what keeps the float set small.
CLEARLY_SLOWER = 1.25
# Errors within this factor of the lowest are the same error: the earlier row (fewer options changed) wins.
# OpenVINO's overflow fix off and on read 0.004761 and 0.004761 on MiniLM-L3 (AMX, VNNI: nothing saturates).
SAME_ERROR = 1.02
# Each variant is timed in turn with the fp32 engine, built in the same job (paired, as trials are timed):
# its ratio to fp32 holds where its milliseconds do not. Timed alone right after NNCF's calibration, the
# demo encoder's int8 read 1.6-1.9x its fp32 (3.2-3.7 ms against 2.0 ms), while its trial, timed paired,
# read 0.79x. A few rounds of blocks, about a second per variant.
TIMING = LatencyProtocol(warmup=3, min_runs=10, max_runs=200, max_seconds=1.5, rel_ci=0.03)


def variant_setups(problem: Problem, override: LayerOverride, route: str, backend: str | None,
                   values: dict) -> list[dict]:
    """The route's variants as this space can build them: [{"options", "config", "layers"}], the space's
    defaults first. options: the route options the variants vary (config keys, each variant's value);
    config: the all-quantized build (layers in float: none); layers: whether the space lets layers stay in
    float under it (the override's `when` and `unless`). values: --set values (by parameter name), which
    fix what they name: a variant that sets another value is left out."""
    base, _ = route_setup(problem, route, backend, values)
    be = get_backend(problem.backend_name(base))
    wanted = list(be.route_variants(base[ROUTE_KEY], may_have_attention(problem.model.proto)))
    varied = sorted({k for w in wanted for k in w})
    extra = be.quantized_settings
    out, seen = [], set()
    for w in wanted or [{}]:
        config, names = route_setup(problem, base[ROUTE_KEY], base.get(BACKEND), values, extra | w)
        if any(config.get(k) != v for k, v in w.items()):
            continue  # the space does not offer it (or --set fixed another value): no trial could build it
        options = {k: config[k] for k in varied if k in config}
        key = json.dumps(options, sort_keys=True, default=str)
        if key in seen:
            continue
        seen.add(key)
        out.append({"options": options, "config": config | {override.key: []},
                    "layers": override_active(override, names)})
    return out


def carried_settings(setups: list[dict], problem: Problem) -> dict:
    """The backend's quantized_settings that the variants' configs carry (e.g. inference_precision bf16)."""
    if not setups:
        return {}
    config = setups[0]["config"]
    extra = get_backend(problem.backend_name(config)).quantized_settings
    return {k: v for k, v in extra.items() if config.get(k) == v}


def _key(problem: Problem, setups: list[dict]) -> str:
    first = setups[0]["config"]
    payload = {"model": problem.model_hash, "data": problem.data_hash, "metric": problem.requirement.primary_metric,
               "user_metrics": sorted(problem.requirement.user_metrics()),
               "configs": [s["config"] for s in setups], "protocol": asdict(TIMING),
               "versions": backend_versions([problem.backend_name(first)])}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def measure_variants(problem: Problem, setups: list[dict], evaluator: Evaluator,
                     on_progress: Callable[[str], None] = lambda s: None) -> dict:
    """Build every variant all-quantized and time it in turn with the fp32 engine: {"fp32_ms", "rows",
    "builds", "seconds", "cached"}; each row {"options", "layers", "error", "ratio" (latency over the fp32
    engine's in the same window), "ms", "feasible"} or {"options", "layers", "failed"}. Cached row by row:
    a rerun builds only what is missing."""
    name = f"variants-{_key(problem, setups)}.json"
    stored = cache.read_json(name) or {}
    started = time.perf_counter()
    metric = problem.requirement.primary_metric
    fp32 = fp32_config(setups[0]["config"])
    builds = 0
    rows = stored.setdefault("rows", {})
    for i, s in enumerate(setups):
        key = json.dumps(s["options"], sort_keys=True, default=str)
        if key not in rows:
            on_progress(f"variants {i + 1}/{len(setups)}: {describe(s['options']) or 'the space defaults'}")
            builds += 1
            try:
                got = evaluator.accuracy(s["config"], TIMING, baseline=fp32)
                rows[key] = {"metrics": got.metrics, "ratio": got.ratio, "ratio_ci": list(got.ratio_ci),
                             "ms": got.median_ms, "fp32_ms": got.baseline_ms}
            except TrialFailure as exc:
                rows[key] = {"failed": str(exc)}
            cache.write_json(name, stored)
    out = [{"options": s["options"], "layers": s["layers"]} | _row(rows[json.dumps(s["options"], sort_keys=True, default=str)],
                                                                   problem, metric) for s in setups]
    fp32_ms = sorted(r["fp32_ms"] for r in out if r.get("fp32_ms"))
    return {"fp32_ms": fp32_ms[len(fp32_ms) // 2] if fp32_ms else None, "rows": out, "builds": builds,
            "seconds": round(time.perf_counter() - started, 1), "cached": builds == 0}


def _row(stored: dict, problem: Problem, metric: str) -> dict:
    """A cached measurement as a table row: its error and feasibility under this problem's requirement
    (the cache holds every metric, so a study with another bound reuses it)."""
    if "failed" in stored:
        return dict(stored)
    metrics = stored["metrics"]
    return {"error": float(metrics[metric]), "feasible": problem.requirement.holds(metrics)} | {
        k: stored[k] for k in ("ratio", "ratio_ci", "ms", "fp32_ms") if k in stored}


def choose(rows: list[dict], slower: float | None = None) -> int | None:
    """The row to rank layers for: among the built rows that keep layers in float, the lowest error among
    those not clearly slower than the fastest of them (ratio to fp32, or ms, within `slower` x); errors
    within SAME_ERROR of it tie, and a tie goes to the earlier row (the space's defaults first, then one
    option changed at a time). None: no such row. slower: CLEARLY_SLOWER by default."""
    slower = CLEARLY_SLOWER if slower is None else slower  # read at the call: a test may change it
    built = [i for i, r in enumerate(rows) if "failed" not in r and r.get("layers", True)]
    if not built:
        return None

    def speed(r: dict) -> float | None:
        return r.get("ratio") or r.get("ms")

    times = [speed(rows[i]) for i in built if speed(rows[i]) is not None]
    fastest = min(times) if times else None
    near = [i for i in built if fastest is None or speed(rows[i]) is None or speed(rows[i]) <= slower * fastest]
    best = min(rows[i]["error"] for i in near)
    return min(i for i in near if rows[i]["error"] <= SAME_ERROR * best + 1e-12)


def describe(options: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in options.items())
