"""Per-layer sensitivity of a quantizing route, and the greedy float set it suggests.

For each per-layer candidate (a node, or a group of nodes by name pattern): the error when only it
is quantized, the error when everything but it is quantized, its share of fp32 latency from ONNX
Runtime's own per-node profile, and the time saved by quantizing it alone. One build per
measurement, with the cheap routes; cached per model, data, route and its options, candidates.

Errors are not additive: the greedy pass builds and measures every set it proposes.
"""
from __future__ import annotations

import csv
import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from typing import Callable

import onnxruntime as ort

from . import evaluate
from .backends import onnxruntime as ortb
from .errors import UserError
from .evaluate import Problem, build_candidate, check_accuracy
from .measure.latency import LatencyProtocol, measure_latency
from .space import LayerOverride, layer_candidates

QUICK = LatencyProtocol(warmup=2, min_runs=5, max_runs=20, max_seconds=0.5)


@dataclass
class Entry:
    name: str
    nodes: list[str]
    error_only: float  # only this candidate quantized
    error_all_but: float  # everything quantized except this candidate
    latency_share: float  # of the fp32 engine's node time
    gain_ms: float  # fp32 latency minus latency with only this candidate quantized


def quantizing_override(problem: Problem, route: str) -> LayerOverride:
    """The per-layer override that applies to `route`, or a plain refusal."""
    for o in problem.space.overrides:
        if route in o.when.get("precision", []):
            if not layer_candidates(o, problem.graph_nodes):
                break
            return o
    routes = sorted({r for o in problem.space.overrides for r in o.when.get("precision", [])})
    raise UserError(f"route {route} has no per-layer candidates in this model and space; "
                    f"per-layer choices exist for: {', '.join(routes) or 'no route'}")


def _error(problem: Problem, config: dict, metric: str, work: str) -> tuple[float, bool, object]:
    try:
        cand = build_candidate(problem, config, work)
    except Exception as exc:  # noqa: BLE001  the route's own failure: say so in one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise UserError(f"route {config.get('precision')} does not build on this model: {type(exc).__name__}: {first}") from None
    metrics, _ = check_accuracy(problem, cand.session)
    return float(metrics[metric]), problem.requirement.holds(metrics), cand


def _latency_ms(problem: Problem, cand) -> float:
    feed = ortb.adapt_feed(cand.session, problem.batches[0])
    return measure_latency(lambda: cand.session.run(None, feed), QUICK).median_ms


def node_time_shares(problem: Problem, work: str) -> dict[str, float]:
    """Share of each node in the fp32 engine's kernel time, from ORT's profiler (basic optimizations,
    which keep the node names)."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(work, "profile")
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    sess = ort.InferenceSession(problem.model_path, so, providers=["CPUExecutionProvider"])
    for _ in range(3):
        ortb.run_batches(sess, problem.batches[:1])
    with open(sess.end_profiling()) as f:
        events = json.load(f)
    totals: dict[str, float] = {}
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            name = e["name"][: -len("_kernel_time")]
            totals[name] = totals.get(name, 0.0) + float(e.get("dur", 0))
    whole = sum(totals.values()) or 1.0
    return {k: v / whole for k, v in totals.items()}


def table_key(problem: Problem, route_config: dict, candidates: dict[str, list[str]]) -> str:
    payload = {"model": problem.model_hash, "data": problem.data_hash, "route": route_config, "candidates": candidates,
               "metric": problem.requirement.primary_metric, "ort": ort.__version__}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def analyze(problem: Problem, route_config: dict, override: LayerOverride,
            on_progress: Callable[[str], None] = lambda s: None) -> dict:
    """The sensitivity table of `route_config` (precision and its options), most sensitive first."""
    candidates = layer_candidates(override, problem.graph_nodes)
    key = table_key(problem, route_config, candidates)
    path = os.path.join(evaluate.CACHE_DIR, f"sensitivity-{key}.json")
    if os.path.isfile(path):
        with open(path) as f:
            table = json.load(f)
        table["cached"] = True
        return table
    metric = problem.requirement.primary_metric
    all_nodes = sorted(n for nodes in candidates.values() for n in nodes)
    with tempfile.TemporaryDirectory(prefix="tuner-sens-") as work:
        shares = node_time_shares(problem, work)
        fp32 = build_candidate(problem, {"precision": "fp32"}, os.path.join(work, "fp32"))
        fp32_ms = _latency_ms(problem, fp32)
        err_all, _, _ = _error(problem, route_config | {override.name: []}, metric, os.path.join(work, "all"))
        entries = []
        for i, (name, nodes) in enumerate(candidates.items()):
            on_progress(f"sensitivity {i + 1}/{len(candidates)}: {name}")
            others = sorted(set(all_nodes) - set(nodes))
            only, _, cand = _error(problem, route_config | {override.name: others}, metric, os.path.join(work, f"o{i}"))
            gain = fp32_ms - _latency_ms(problem, cand)
            all_but, _, _ = _error(problem, route_config | {override.name: sorted(nodes)}, metric, os.path.join(work, f"b{i}"))
            entries.append(Entry(name, nodes, only, all_but, sum(shares.get(n, 0.0) for n in nodes), gain))
    # Most sensitive first: the largest error when quantized alone; ties by the error left when it
    # alone stays in float (lower means keeping it fixes more).
    entries.sort(key=lambda e: (-e.error_only, e.error_all_but))
    table = {"key": key, "route": route_config, "override": override.name, "metric": metric, "fp32_ms": fp32_ms,
             "error_all_quantized": err_all, "entries": [asdict(e) for e in entries], "cached": False}
    os.makedirs(evaluate.CACHE_DIR, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(table, f)
    os.replace(tmp, path)
    return table


def greedy_float_set(problem: Problem, route_config: dict, table: dict,
                     on_progress: Callable[[str], None] = lambda s: None) -> tuple[list[str] | None, int]:
    """Keep the most sensitive in float until the requirement holds, then drop back any that are not
    needed. Returns (the candidate names kept, builds made); None when even all-float fails."""
    entries = table["entries"]
    nodes_of = {e["name"]: e["nodes"] for e in entries}
    metric = table["metric"]
    builds = 0

    def holds(names: list[str]) -> bool:
        nonlocal builds
        builds += 1
        kept = sorted(n for name in names for n in nodes_of[name])
        with tempfile.TemporaryDirectory(prefix="tuner-greedy-") as work:
            _, ok, _ = _error(problem, route_config | {table["override"]: kept}, metric, work)
        return ok

    order = [e["name"] for e in entries]
    kept = None
    for k in range(len(order) + 1):
        on_progress(f"greedy: {k} most sensitive in float")
        if holds(order[:k]):
            kept = order[:k]
            break
    if kept is None:
        return None, builds
    for name in reversed(list(kept)):  # least sensitive of the kept first
        trial = [n for n in kept if n != name]
        on_progress(f"greedy: without {name}")
        if holds(trial):
            kept = trial
    return kept, builds


def ranking_for_study(problem: Problem, route_config: dict, override: LayerOverride,
                      on_progress: Callable[[str], None] = lambda s: None) -> dict:
    """What a sensitivity-encoded study stores: the order (greedy set first, then the rest by
    sensitivity) and the cut (size of the greedy set), with the table it came from."""
    table = analyze(problem, route_config, override, on_progress)
    kept, builds = greedy_float_set(problem, route_config, table, on_progress)
    rest = [e["name"] for e in table["entries"] if e["name"] not in (kept or [])]
    return {"override": override.name, "route": route_config, "table_key": table["key"],
            "order": (kept or []) + rest, "cut": len(kept) if kept is not None else len(rest),
            "greedy_feasible": kept is not None, "greedy_builds": builds,
            "nodes": {e["name"]: e["nodes"] for e in table["entries"]}}


def write_table(table: dict, prefix: str) -> list[str]:
    """PREFIX.csv and PREFIX.json; returns the paths."""
    csv_path, json_path = f"{prefix}.csv", f"{prefix}.json"
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["rank", "candidate", "nodes", f"{table['metric']}_only_quantized",
                    f"{table['metric']}_all_but_quantized", "fp32_time_share", "gain_ms"])
        for i, e in enumerate(table["entries"], 1):
            w.writerow([i, e["name"], len(e["nodes"]), f"{e['error_only']:.6g}", f"{e['error_all_but']:.6g}",
                        f"{e['latency_share']:.4f}", f"{e['gain_ms']:.3f}"])
    with open(json_path, "w") as f:
        json.dump(table, f, indent=1)
    return [csv_path, json_path]
