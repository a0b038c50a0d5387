"""Per-layer sensitivity of a quantizing route, and the greedy float set it suggests.

For each per-layer candidate (a node, or a group of nodes by name pattern): the error when only it
is quantized, the error when everything but it is quantized, its share of fp32 latency from the
backend's per-node profile, and the time saved by quantizing it alone. One build per measurement,
each through the isolated evaluator (a crash in a build fails the analysis, never the caller);
cached per model, data, route and its options, candidates and backend versions.

Errors are not additive: the greedy pass builds and measures every set it proposes.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from ..backends.base import backend_versions
from ..errors import UserError
from ..execute.isolate import TrialFailure
from ..execute.jobs import Evaluator
from ..inputs.configs import layer_candidates
from ..inputs.space import LayerOverride
from ..measure.latency import LatencyProtocol
from ..problem.spec import Problem
from ..store import cache
from .quantizing import fp32_config

QUICK = LatencyProtocol(warmup=2, min_runs=5, max_runs=20, max_seconds=0.5)


@dataclass
class Entry:
    name: str
    nodes: list[str]
    error_only: float  # only this candidate quantized
    error_all_but: float  # everything quantized except this candidate
    latency_share: float  # of the fp32 engine's node time
    gain_ms: float  # fp32 latency minus latency with only this candidate quantized
    group: str | None = None  # set when the budget left it unmeasured: the figures are its group's


DEFAULT_BUDGET = 150  # builds of one analysis (--sensitivity-budget): about 6 minutes for a 6-layer encoder here


def group_candidates(candidates: dict[str, list[str]], override: LayerOverride) -> dict[str, dict[str, list[str]]]:
    """Candidates grouped for a first, coarse ranking: by the override's group_pattern where it splits
    them, else by the first name component with a digit (block1, layer.0), else into about sqrt(n)
    runs in graph order."""
    n = len(candidates)

    def useful(groups: dict) -> bool:
        return 1 < len(groups) <= max(2, n // 2)

    def by(key_of) -> dict[str, dict[str, list[str]]]:
        groups: dict[str, dict[str, list[str]]] = {}
        for cand, nodes in candidates.items():
            groups.setdefault(key_of(cand), {})[cand] = nodes
        return groups

    if override.group_pattern:
        groups = by(lambda c: (m.group(1) if m.groups() else m.group(0)) if (m := re.search(override.group_pattern, c)) else c)
        if useful(groups):
            return groups

    def numbered_prefix(name: str) -> str:
        parts = name.split("/")
        for i, part in enumerate(parts):
            if any(ch.isdigit() for ch in part):
                return "/".join(parts[: i + 1])
        return parts[0]

    groups = by(numbered_prefix)
    if useful(groups):
        return groups
    size = max(2, math.ceil(math.sqrt(n)))
    order = list(candidates)
    return by(lambda c: f"{order[(order.index(c) // size) * size]}..")


def _measure(problem: Problem, evaluator: Evaluator, config: dict, timing: LatencyProtocol | None = None) -> dict:
    """One build's metrics (and quick latency); a build that fails is the route's failure, said in one line.
    Cached as measured, so an analysis killed midway resumes at the build that was in flight."""
    backend = problem.backend_name(config)
    scope = json.dumps([problem.model_hash, problem.data_hash, backend_versions([backend]),
                        sorted(problem.requirement.user_metrics())], sort_keys=True)
    name = f"measured-{hashlib.sha256(scope.encode()).hexdigest()[:16]}.json"
    key = json.dumps([config, asdict(timing) if timing else None], sort_keys=True, default=str)
    got = (cache.read_json(name) or {}).get(key)
    if got is None:
        try:
            got = evaluator.accuracy(config, timing)
        except TrialFailure as exc:
            raise UserError(f"route {config.get('precision')} does not build on this model: {exc}") from None
        stored = cache.read_json(name) or {}  # read again: another study may have added builds meanwhile
        stored[key] = got
        cache.write_json(name, stored)
    return got | {"feasible": problem.requirement.holds(got["metrics"])}  # this study's bounds, whatever stored it


def table_key(problem: Problem, route_config: dict, candidates: dict[str, list[str]], budget: int | None,
              base: int = 2) -> str:
    payload = {"model": problem.model_hash, "data": problem.data_hash, "route": route_config, "candidates": candidates,
               "metric": problem.requirement.primary_metric,
               "versions": backend_versions([problem.backend_name(route_config)]),
               "budget": budget if budget is not None and _full_cost(candidates, base) > budget else None}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def _full_cost(candidates: dict, base: int = 2) -> int:
    return base + 2 * len(candidates)  # fp32 and everything quantized (unless known), then two builds per candidate


def _entries(problem: Problem, route_config: dict, override: LayerOverride, evaluator: Evaluator,
             candidates: dict[str, list[str]], all_nodes: list[str], shares: dict, fp32_ms: float,
             on_progress: Callable[[str], None]) -> list[Entry]:
    """Two builds per candidate: only it quantized, everything but it quantized. Most sensitive first:
    the largest error when quantized alone; ties by the error left when it alone stays in float."""
    metric = problem.requirement.primary_metric
    out = []
    for i, (cand, nodes) in enumerate(candidates.items()):
        on_progress(f"sensitivity {i + 1}/{len(candidates)}: {cand}")
        others = sorted(set(all_nodes) - set(nodes))
        only = _measure(problem, evaluator, route_config | {override.key: others}, QUICK)
        all_but = _measure(problem, evaluator, route_config | {override.key: sorted(nodes)})
        out.append(Entry(cand, nodes, float(only["metrics"][metric]), float(all_but["metrics"][metric]),
                         sum(shares.get(n, 0.0) for n in nodes), fp32_ms - only["median_ms"]))
    return sorted(out, key=lambda e: (-e.error_only, e.error_all_but))


def analyze(problem: Problem, route_config: dict, override: LayerOverride, evaluator: Evaluator,
            on_progress: Callable[[str], None] = lambda s: None, budget: int | None = None,
            known: dict | None = None) -> dict:
    """The sensitivity table of `route_config` (precision and its options), most sensitive first.
    With a budget (builds) too small to rank every candidate, groups are ranked first, then the
    candidates inside the most sensitive groups while the budget lasts; the rest keep their group's
    figures and place. known: "fp32_ms" and/or "error_all_quantized" measured already (the error by the
    variant stage, tuner.analysis.variants): those builds are not made again. The fp32 latency the gains are taken
    from should be timed as the candidates' are (alone, QUICK), so the variant stage's paired figure is not one."""
    candidates = layer_candidates(override, problem.graph_nodes)
    known = known or {}
    base = 2 - sum(k in known for k in ("fp32_ms", "error_all_quantized"))
    key = table_key(problem, route_config, candidates, budget, base)
    name = f"sensitivity-{key}.json"
    table = cache.read_json(name)
    if table is not None:
        table["cached"] = True
        return table
    started = time.perf_counter()
    metric = problem.requirement.primary_metric
    all_nodes = sorted(n for nodes in candidates.values() for n in nodes)
    shares = evaluator.node_times(problem.backend_name(route_config))
    fp32_ms = known.get("fp32_ms") or _measure(problem, evaluator, fp32_config(route_config), QUICK)["median_ms"]
    err_all = known.get("error_all_quantized")
    if err_all is None:
        err_all = _measure(problem, evaluator, route_config | {override.key: []})["metrics"][metric]
    args = (problem, route_config, override, evaluator)
    if budget is None or _full_cost(candidates, base) <= budget:
        entries = _entries(*args, candidates, all_nodes, shares, fp32_ms, on_progress)
        builds = _full_cost(candidates, base)
    else:
        groups = group_candidates(candidates, override)
        flat = {g: sorted(n for nodes in members.values() for n in nodes) for g, members in groups.items()}
        ranked = _entries(*args, flat, all_nodes, shares, fp32_ms, lambda m: on_progress(f"groups: {m}"))
        builds = _full_cost(flat, base)
        entries = []
        for g in ranked:
            members = groups[g.name]
            if len(members) > 1 and builds + 2 * len(members) <= budget:
                entries += _entries(*args, members, all_nodes, shares, fp32_ms, on_progress)
                builds += 2 * len(members)
            else:
                entries += [Entry(c, nodes, g.error_only, g.error_all_but, sum(shares.get(n, 0.0) for n in nodes),
                                  0.0, group=g.name) for c, nodes in members.items()]
    table = {"key": key, "route": route_config, "override": override.name, "config_key": override.key,
             "metric": metric, "fp32_ms": fp32_ms,
             "error_all_quantized": err_all, "entries": [asdict(e) for e in entries], "cached": False,
             "builds": builds, "seconds": time.perf_counter() - started, "budget": budget}
    cache.write_json(name, table)
    return table


def greedy_float_set(problem: Problem, route_config: dict, table: dict, evaluator: Evaluator,
                     on_progress: Callable[[str], None] = lambda s: None,
                     budget: int | None = None) -> tuple[list[str] | None, int]:
    """Keep the most sensitive in float until the requirement holds, then drop back any that are not
    needed. Returns (the candidate names kept, builds made); None when even all-float fails, or when
    the budget (builds) runs out before any set holds."""
    entries = table["entries"]
    nodes_of = {e["name"]: e["nodes"] for e in entries}
    builds = 0

    def holds(names: list[str]) -> bool:
        nonlocal builds
        builds += 1
        kept = sorted(n for name in names for n in nodes_of[name])
        return _measure(problem, evaluator, route_config | {table.get("config_key", table["override"]): kept})["feasible"]

    def spent() -> bool:
        return budget is not None and builds >= budget

    order = [e["name"] for e in entries]
    kept = None
    for k in range(len(order) + 1):
        if spent():
            return None, builds
        on_progress(f"greedy: {k} most sensitive in float")
        if holds(order[:k]):
            kept = order[:k]
            break
    if kept is None:
        return None, builds
    for name in reversed(list(kept)):  # least sensitive of the kept first
        if spent():
            break
        trial = [n for n in kept if n != name]
        on_progress(f"greedy: without {name}")
        if holds(trial):
            kept = trial
    return kept, builds


def ranking_for_study(problem: Problem, route_config: dict, override: LayerOverride, evaluator: Evaluator,
                      on_progress: Callable[[str], None] = lambda s: None, budget: int | None = DEFAULT_BUDGET,
                      known: dict | None = None) -> dict:
    """What a sensitivity-encoded study stores: the order (greedy set first, then the rest by
    sensitivity) and the cut (size of the greedy set), with the table it came from and what the
    analysis cost (builds and seconds; a cached table costs none)."""
    started = time.perf_counter()
    table = analyze(problem, route_config, override, evaluator, on_progress, budget, known)
    left = None if budget is None else max(budget - (0 if table["cached"] else table.get("builds", 0)), 0)
    kept, builds = greedy_float_set(problem, route_config, table, evaluator, on_progress, left)
    rest = [e["name"] for e in table["entries"] if e["name"] not in (kept or [])]
    return {"override": override.name, "route": route_config, "table_key": table["key"],
            "order": (kept or []) + rest, "cut": len(kept) if kept is not None else len(rest),
            "greedy_feasible": kept is not None, "greedy_builds": builds,
            "analysis_builds": (0 if table["cached"] else table.get("builds", 0)) + builds,
            "analysis_s": round(time.perf_counter() - started, 1),
            "nodes": {e["name"]: e["nodes"] for e in table["entries"]},
            # the table itself, for the report (the cache that holds it may be on another machine)
            "entries": [{k: (round(e[k], 6) if isinstance(e[k], float) else e[k])
                         for k in ("name", "error_only", "error_all_but", "latency_share", "gain_ms", "group")}
                        for e in table["entries"]]}
