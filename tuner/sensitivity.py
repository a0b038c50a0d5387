"""Per-layer sensitivity of a quantizing route, and the greedy float set it suggests.

For each per-layer candidate (a node, or a group of nodes by name pattern): the error when only it
is quantized, the error when everything but it is quantized, its share of fp32 latency from the
backend's per-node profile, and the time saved by quantizing it alone. One build per measurement,
each through the isolated evaluator (a crash in a build fails the analysis, never the caller);
cached per model, data, route and its options, candidates and backend versions.

Errors are not additive: the greedy pass builds and measures every set it proposes.
"""
from __future__ import annotations

import csv
import hashlib
import json
import sys
from dataclasses import asdict, dataclass
from typing import Callable

from . import cache
from .backends.base import backend_versions, get_backend
from .errors import UserError
from .evaluate import Evaluator
from .isolate import TrialFailure
from .measure.latency import LatencyProtocol
from .problem import Problem
from .space import BACKEND, LayerOverride, layer_candidates

QUICK = LatencyProtocol(warmup=2, min_runs=5, max_runs=20, max_seconds=0.5)


@dataclass
class Entry:
    name: str
    nodes: list[str]
    error_only: float  # only this candidate quantized
    error_all_but: float  # everything quantized except this candidate
    latency_share: float  # of the fp32 engine's node time
    gain_ms: float  # fp32 latency minus latency with only this candidate quantized


def quantizing_override(problem: Problem, route: str, backend: str | None = None) -> LayerOverride:
    """The per-layer override that applies to `route` (of `backend`, in a space over several), or a
    plain refusal."""
    space = problem.space
    mine = [o for o in space.overrides if backend is None or backend in space.backends_of(o.when)]
    for o in mine:
        if route in space.route_param(o)[1]:
            if not layer_candidates(o, problem.graph_nodes):
                break
            return o
    routes = sorted({r for o in mine for r in space.route_param(o)[1]})
    raise UserError(f"route {route} has no per-layer candidates in this model and space"
                    f"{f' for backend {backend}' if backend else ''}; per-layer choices exist for: "
                    f"{', '.join(routes) or 'no route'}")


def route_config(problem: Problem, route: str | None, backend: str | None, values: dict) -> dict:
    """The config a sensitivity analysis quantizes with: route, its options (config keys) and, in a space
    over several backends, the backend. Without a route, the backend's first quantizing route."""
    space = problem.space
    if backend is not None and backend not in space.backends:
        raise UserError(f"--backend {backend}: not a backend of the space {space.path} "
                        f"({', '.join(space.backends)}); give a space with it, e.g. --space cpu.yaml")
    if backend is None:  # the backend whose routes have `route`
        backend = next((b for b in space.backends if route is None or route in get_backend(b).routes), space.backends[0])
    config = {"precision": route or get_backend(backend).quantizing_routes[0]} | space.keys(values)
    return config | ({BACKEND: backend} if len(space.backends) > 1 else {})


def _backend(problem: Problem, route_config: dict) -> str:
    return route_config.get(BACKEND) or problem.space.backends[0]


def _measure(evaluator: Evaluator, config: dict, timing: LatencyProtocol | None = None) -> dict:
    """One build's metrics (and quick latency); a build that fails is the route's failure, said in one line."""
    try:
        return evaluator.accuracy(config, timing)
    except TrialFailure as exc:
        raise UserError(f"route {config.get('precision')} does not build on this model: {exc}") from None


def table_key(problem: Problem, route_config: dict, candidates: dict[str, list[str]]) -> str:
    payload = {"model": problem.model_hash, "data": problem.data_hash, "route": route_config, "candidates": candidates,
               "metric": problem.requirement.primary_metric,
               "versions": backend_versions([_backend(problem, route_config)])}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def analyze(problem: Problem, route_config: dict, override: LayerOverride, evaluator: Evaluator,
            on_progress: Callable[[str], None] = lambda s: None) -> dict:
    """The sensitivity table of `route_config` (precision and its options), most sensitive first."""
    candidates = layer_candidates(override, problem.graph_nodes)
    table_id = table_key(problem, route_config, candidates)
    name = f"sensitivity-{table_id}.json"
    table = cache.read_json(name)
    if table is not None:
        table["cached"] = True
        return table
    metric = problem.requirement.primary_metric
    all_nodes = sorted(n for nodes in candidates.values() for n in nodes)
    shares = evaluator.node_times(_backend(problem, route_config))
    fp32 = {k: v for k, v in route_config.items() if k == BACKEND} | {"precision": "fp32"}
    fp32_ms = _measure(evaluator, fp32, QUICK)["median_ms"]
    key = override.key  # the config key of the kept-in-float list
    err_all = _measure(evaluator, route_config | {key: []})["metrics"][metric]
    entries = []
    for i, (cand, nodes) in enumerate(candidates.items()):
        on_progress(f"sensitivity {i + 1}/{len(candidates)}: {cand}")
        others = sorted(set(all_nodes) - set(nodes))
        only = _measure(evaluator, route_config | {key: others}, QUICK)
        all_but = _measure(evaluator, route_config | {key: sorted(nodes)})
        entries.append(Entry(cand, nodes, float(only["metrics"][metric]), float(all_but["metrics"][metric]),
                             sum(shares.get(n, 0.0) for n in nodes), fp32_ms - only["median_ms"]))
    # Most sensitive first: the largest error when quantized alone; ties by the error left when it
    # alone stays in float (lower means keeping it fixes more).
    entries.sort(key=lambda e: (-e.error_only, e.error_all_but))
    table = {"key": table_id, "route": route_config, "override": override.name, "config_key": key, "metric": metric,
             "fp32_ms": fp32_ms,
             "error_all_quantized": err_all, "entries": [asdict(e) for e in entries], "cached": False}
    cache.write_json(name, table)
    return table


def greedy_float_set(problem: Problem, route_config: dict, table: dict, evaluator: Evaluator,
                     on_progress: Callable[[str], None] = lambda s: None) -> tuple[list[str] | None, int]:
    """Keep the most sensitive in float until the requirement holds, then drop back any that are not
    needed. Returns (the candidate names kept, builds made); None when even all-float fails."""
    entries = table["entries"]
    nodes_of = {e["name"]: e["nodes"] for e in entries}
    builds = 0

    def holds(names: list[str]) -> bool:
        nonlocal builds
        builds += 1
        kept = sorted(n for name in names for n in nodes_of[name])
        return _measure(evaluator, route_config | {table.get("config_key", table["override"]): kept})["feasible"]

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


def ranking_for_study(problem: Problem, route_config: dict, override: LayerOverride, evaluator: Evaluator,
                      on_progress: Callable[[str], None] = lambda s: None) -> dict:
    """What a sensitivity-encoded study stores: the order (greedy set first, then the rest by
    sensitivity) and the cut (size of the greedy set), with the table it came from."""
    table = analyze(problem, route_config, override, evaluator, on_progress)
    kept, builds = greedy_float_set(problem, route_config, table, evaluator, on_progress)
    rest = [e["name"] for e in table["entries"] if e["name"] not in (kept or [])]
    return {"override": override.name, "route": route_config, "table_key": table["key"],
            "order": (kept or []) + rest, "cut": len(kept) if kept is not None else len(rest),
            "greedy_feasible": kept is not None, "greedy_builds": builds,
            "nodes": {e["name"]: e["nodes"] for e in table["entries"]}}


def study_rankings(problem: Problem, timeout_s: float = 600.0, quiet: bool = True) -> dict[str, dict]:
    """For each override with the sensitivity encoding: its ranking, from the (cached) sensitivity
    table and the greedy pass over it. Computed once per study and stored in it."""
    out = {}
    wanted = [o for o in problem.space.overrides if o.encoding == "sensitivity"]
    if not wanted:
        return out
    progress = (lambda msg: None) if quiet else (lambda msg: print(f"\r{msg:70s}", end="", file=sys.stderr, flush=True))
    with Evaluator(problem.spec, timeout_s, persistent=True) as evaluator:
        for o in wanted:
            backends = problem.space.backends_of(o.when)
            config = route_config(problem, o.sensitivity_route, backends[0], {})
            out[o.name] = r = ranking_for_study(problem, config, o, evaluator, progress)
            if not quiet:
                print(f"\rsensitivity of {o.sensitivity_route}: greedy float set {r['order'][:r['cut']]} "
                      f"({r['greedy_builds']} builds)", file=sys.stderr)
    return out


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
