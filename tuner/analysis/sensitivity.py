"""Per-layer sensitivity of a quantizing route, and the greedy float set it suggests. Two methods:

- activations (the default): one float run and one all-quantized run, each candidate's output compared
  between them the way ONNX Runtime's qdq_loss_debug compares activations; a candidate's sensitivity is
  the error its own quantization adds to its output (its output's relative error beyond its inputs',
  independent noises adding in quadrature). Two builds, then a few real builds confirm the float
  set: the k most sensitive kept in float for k = 1, 2, 4, ... until the requirement holds, a bisection
  below that, and each kept layer dropped back where the rest still holds.
- builds (exhaustive, the method before it): for each candidate the error when only it is quantized and
  when everything but it is, two builds per candidate, and its time saved quantized alone; then the
  greedy pass over k = 0, 1, 2, ...

Both give each candidate's share of fp32 latency from the backend's per-node profile. Every build goes
through the isolated evaluator (a crash in a build fails the analysis, never the caller) and is cached per
model, data, route and its options, candidates and backend versions. Errors are not additive: the
float set is confirmed by builds of every set it proposes.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from ..backends.base import backend_versions, get_backend
from ..errors import TrialFailure, UserError
from ..execute.jobs import Evaluator
from ..execute.results import QuickCheck
from ..inputs.configs import layer_candidates
from ..inputs.space import LayerOverride
from ..measure.latency import LatencyProtocol
from ..problem.spec import Problem
from ..store import cache
from .quantizing import fp32_config

QUICK = LatencyProtocol(warmup=2, min_runs=5, max_runs=20, max_seconds=0.5)


@dataclass
class Entry:
    """One candidate's row. Method builds: the model's error with only it quantized (error_only) and with
    everything but it (error_all_but). Method activations: the relative error its own quantization adds to
    its output (error_only) and its output's relative error in the all-quantized run (error_all_but)."""

    name: str
    nodes: list[str]
    error_only: float
    error_all_but: float
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


def _measure(problem: Problem, evaluator: Evaluator, config: dict, timing: LatencyProtocol | None = None) -> QuickCheck:
    """One build's metrics (and quick latency); a build that fails is the route's failure, said in one line.
    Cached as measured, so an analysis killed midway resumes at the build that was in flight."""
    backend = problem.backend_name(config)
    scope = json.dumps([problem.model_hash, problem.data_hash, backend_versions([backend]),
                        sorted(problem.requirement.user_metrics())], sort_keys=True)
    name = f"measured-{hashlib.sha256(scope.encode()).hexdigest()[:16]}.json"
    key = json.dumps([config, asdict(timing) if timing else None], sort_keys=True, default=str)
    cached = (cache.read_json(name) or {}).get(key)
    if cached is not None:
        got = QuickCheck.from_json(cached)
    else:
        try:
            got = evaluator.accuracy(config, timing)
        except TrialFailure as exc:
            raise UserError(f"route {config.get('precision')} does not build on this model: {exc}") from None
        stored = cache.read_json(name) or {}  # read again: another study may have added builds meanwhile
        stored[key] = got.to_json()
        cache.write_json(name, stored)
    return got.judged(problem.requirement.holds(got.metrics))  # this study's bounds, whatever stored it


def table_name(key: str) -> str:
    return f"sensitivity-{key}.json"


def cached_table(name: str) -> dict | None:
    """The table stored under `name` by an earlier analysis (marked cached), or None."""
    table = cache.read_json(name)
    if table is not None:
        table["cached"] = True
    return table


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
        out.append(Entry(cand, nodes, float(only.metrics[metric]), float(all_but.metrics[metric]),
                         sum(shares.get(n, 0.0) for n in nodes), fp32_ms - only.median_ms))
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
    name = table_name(key)
    if (table := cached_table(name)) is not None:
        return table
    started = time.perf_counter()
    metric = problem.requirement.primary_metric
    all_nodes = sorted(n for nodes in candidates.values() for n in nodes)
    shares = evaluator.node_times(problem.backend_name(route_config))
    fp32_ms = known.get("fp32_ms") or _measure(problem, evaluator, fp32_config(route_config), QUICK).median_ms
    err_all = known.get("error_all_quantized")
    if err_all is None:
        err_all = _measure(problem, evaluator, route_config | {override.key: []}).metrics[metric]
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
             "metric": metric, "method": "builds", "fp32_ms": fp32_ms,
             "error_all_quantized": err_all, "entries": [asdict(e) for e in entries], "cached": False,
             "builds": builds, "seconds": time.perf_counter() - started, "budget": budget}
    cache.write_json(name, table)
    return table


def _activation_tensors(problem: Problem, candidates: dict[str, list[str]]) -> dict[str, tuple[str, list[str]]]:
    """Per candidate node: (its output tensor, its activation inputs: inputs that are no initializer)."""
    graph = problem.model.proto.graph
    constants = {i.name for i in graph.initializer} | {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    by_name = {n.name: n for n in graph.node}
    return {n: (by_name[n].output[0], [i for i in by_name[n].input if i and i not in constants])
            for nodes in candidates.values() for n in nodes if n in by_name}


def added_error(output: float, inputs: list[float]) -> float:
    """The relative error a layer's own quantization adds to its output: its output's beyond what its inputs
    bring, independent relative noises adding in quadrature (a product of two noisy activations, attention's
    Q K^T, carries both inputs' errors)."""
    return math.sqrt(max(output ** 2 - sum(e ** 2 for e in inputs), 0.0))


def analyze_activations(problem: Problem, route_config: dict, override: LayerOverride, evaluator: Evaluator,
                        float_config: dict, on_progress: Callable[[str], None] = lambda s: None) -> dict | None:
    """The sensitivity table from one float and one all-quantized run (method activations), most sensitive
    first; None where the backend cannot give activations. float_config: the float engine compared with."""
    candidates = layer_candidates(override, problem.graph_nodes)
    key = table_key(problem, route_config | {"method": "activations", "float": float_config}, candidates, None)
    name = table_name(key)
    if (table := cached_table(name)) is not None:
        return table
    started = time.perf_counter()
    io = _activation_tensors(problem, candidates)
    tensors = sorted({t for out, ins in io.values() for t in [out, *ins]})
    on_progress("sensitivity: one float and one all-quantized run")
    errors = evaluator.activation_errors(float_config, route_config | {override.key: []}, tensors)
    if errors is None:
        return None
    shares = evaluator.node_times(problem.backend_name(route_config))
    entries = []
    for cand, nodes in candidates.items():
        mine = [io[n] for n in nodes if n in io and io[n][0] in errors]
        added = max((added_error(errors[out], [errors.get(i, 0.0) for i in ins]) for out, ins in mine), default=0.0)
        output = max((errors[out] for out, _ in mine), default=0.0)
        entries.append(Entry(cand, nodes, added, output, sum(shares.get(n, 0.0) for n in nodes), 0.0))
    entries.sort(key=lambda e: (-e.error_only, -e.error_all_but))
    table = {"key": key, "route": route_config, "override": override.name, "config_key": override.key,
             "metric": problem.requirement.primary_metric, "method": "activations", "fp32_ms": None,
             "error_all_quantized": None, "entries": [asdict(e) for e in entries], "cached": False, "builds": 2,
             "seconds": time.perf_counter() - started, "budget": None}
    cache.write_json(name, table)
    return table


class FloatSetBuilds:
    """Whether keeping a set of a table's candidates in float meets the requirement, by a real build: each set
    built once, whichever step asks for it; None once `budget` builds are spent. builds: those made."""

    def __init__(self, problem: Problem, route_config: dict, table: dict, evaluator: Evaluator, budget: int | None):
        self.problem, self.route_config, self.evaluator, self.budget = problem, route_config, evaluator, budget
        self.key = table.get("config_key", table["override"])
        self.nodes_of = {e["name"]: e["nodes"] for e in table["entries"]}
        self.known: dict[frozenset, bool] = {}
        self.builds = 0

    def __call__(self, names: list[str]) -> bool | None:
        asked = frozenset(names)
        if asked not in self.known:
            if self.budget is not None and self.builds >= self.budget:
                return None
            self.builds += 1
            kept = sorted(n for name in names for n in self.nodes_of[name])
            self.known[asked] = _measure(self.problem, self.evaluator, self.route_config | {self.key: kept}).feasible
        return self.known[asked]


def confirmed_float_set(problem: Problem, route_config: dict, table: dict, evaluator: Evaluator,
                        on_progress: Callable[[str], None] = lambda s: None,
                        budget: int | None = None) -> tuple[list[str] | None, int]:
    """The float set the table's order suggests, confirmed by real builds: the k most sensitive kept in float
    for k = 1, 2, 4, ... until the requirement holds, the smallest such k found by bisection below it, then
    each kept candidate (least sensitive first) dropped back where the rest still holds (drop_back). About
    2 log2(k) + k builds. Returns (the candidate names kept, builds made); None when even all in float fails,
    or when the budget (builds) runs out before any set holds."""
    order = [e["name"] for e in table["entries"]]
    holds = FloatSetBuilds(problem, route_config, table, evaluator, budget)

    k, low = 1, 0
    while True:
        on_progress(f"confirming: the {min(k, len(order))} most sensitive in float")
        got = holds(order[:k])
        if got is None:
            return None, holds.builds
        if got:
            break
        if k >= len(order):
            return None, holds.builds
        low, k = k, 2 * k
    high = min(k, len(order))
    while high - low > 1:  # the smallest k that holds, between the last that failed and the first that held
        mid = (low + high) // 2
        on_progress(f"confirming: the {mid} most sensitive in float")
        got = holds(order[:mid])
        if got is None:
            break
        low, high = (low, mid) if got else (mid, high)
    return drop_back(order[:high], holds, lambda name: on_progress(f"confirming: without {name}")), holds.builds


def greedy_float_set(problem: Problem, route_config: dict, table: dict, evaluator: Evaluator,
                     on_progress: Callable[[str], None] = lambda s: None,
                     budget: int | None = None) -> tuple[list[str] | None, int]:
    """Keep the most sensitive in float until the requirement holds, then drop back any that are not
    needed (drop_back). Returns (the candidate names kept, builds made); None when even all-float fails, or
    when the budget (builds) runs out before any set holds."""
    order = [e["name"] for e in table["entries"]]
    holds = FloatSetBuilds(problem, route_config, table, evaluator, budget)
    for k in range(len(order) + 1):
        on_progress(f"greedy: {k} most sensitive in float")
        got = holds(order[:k])
        if got is None:
            return None, holds.builds
        if got:
            return drop_back(order[:k], holds, lambda name: on_progress(f"greedy: without {name}")), holds.builds
    return None, holds.builds


def drop_back(kept: list[str], holds: Callable[[list[str]], bool | None],
              trying: Callable[[str], None] = lambda name: None) -> list[str]:
    """A float set that holds, made smaller: each kept candidate, least sensitive first, dropped where the rest
    still holds. Passes repeat until one drops nothing, as errors do not add up layer by layer: on PP-OCRv4's
    recognizer p2o.Conv.0 could go only once p2o.MatMul.6, tried before it, had gone. holds: None once the
    budget is spent (the set so far is kept); a set it has answered costs nothing the second time."""
    while True:
        before = list(kept)
        for name in reversed(before):
            trial = [n for n in kept if n != name]
            if not trial:
                continue
            trying(name)
            got = holds(trial)
            if got is None:
                return kept
            if got:
                kept = trial
        if kept == before:
            return kept


def sensitivity_table(problem: Problem, route_config: dict, override: LayerOverride, evaluator: Evaluator,
                      method: str = "activations", on_progress: Callable[[str], None] = lambda s: None,
                      budget: int | None = None, known: dict | None = None, float_config: dict | None = None) -> dict:
    """The sensitivity table by `method` (search.choices.SENSITIVITY_METHODS); activations falls back to
    builds where the backend cannot give them. float_config: the float engine activations compare with
    (default: the route's backend at fp32, computing in float32 throughout: Backend.float32)."""
    table = None
    if method == "activations":
        backend = problem.backend_name(route_config)
        table = analyze_activations(problem, route_config, override, evaluator,
                                    float_config or fp32_config(route_config) | get_backend(backend).float32, on_progress)
    return table if table is not None else analyze(problem, route_config, override, evaluator, on_progress, budget, known)


def float_set(problem: Problem, route_config: dict, table: dict, evaluator: Evaluator,
              on_progress: Callable[[str], None] = lambda s: None, budget: int | None = None) -> tuple[list[str] | None, int]:
    """The float set of a table, confirmed by builds as its method goes (confirmed_float_set, greedy_float_set)."""
    confirm = confirmed_float_set if table.get("method") == "activations" else greedy_float_set
    return confirm(problem, route_config, table, evaluator, on_progress, budget)


def ranking_for_study(problem: Problem, route_config: dict, override: LayerOverride, evaluator: Evaluator,
                      on_progress: Callable[[str], None] = lambda s: None, budget: int | None = DEFAULT_BUDGET,
                      known: dict | None = None, method: str = "activations", float_config: dict | None = None) -> dict:
    """What a sensitivity-encoded study stores: the order (greedy set first, then the rest by
    sensitivity) and the cut (size of the greedy set), with the table it came from, its method, and what the
    analysis cost (builds and seconds; a cached table costs none). method activations falls back to builds
    where the backend cannot give activations. float_config: the float engine activations compare with
    (default: the route's backend at fp32)."""
    started = time.perf_counter()
    table = sensitivity_table(problem, route_config, override, evaluator, method, on_progress, budget, known, float_config)
    left = None if budget is None else max(budget - (0 if table["cached"] else table.get("builds", 0)), 0)
    kept, builds = float_set(problem, route_config, table, evaluator, on_progress, left)
    rest = [e["name"] for e in table["entries"] if e["name"] not in (kept or [])]
    return {"override": override.name, "route": route_config, "table_key": table["key"],
            "method": table.get("method", "builds"),
            "order": (kept or []) + rest, "cut": len(kept) if kept is not None else len(rest),
            "greedy_feasible": kept is not None, "greedy_builds": builds,
            "analysis_builds": (0 if table["cached"] else table.get("builds", 0)) + builds,
            "analysis_s": round(time.perf_counter() - started, 1),
            "nodes": {e["name"]: e["nodes"] for e in table["entries"]},
            # the table itself, for the report (the cache that holds it may be on another machine)
            "entries": [{k: (round(e[k], 6) if isinstance(e[k], float) else e[k])
                         for k in ("name", "error_only", "error_all_but", "latency_share", "gain_ms", "group")}
                        for e in table["entries"]]}
