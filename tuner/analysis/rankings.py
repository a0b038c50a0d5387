"""What a study measures before its first trial, per override with the sensitivity encoding: the route's
variants (tuner.analysis.variants: every accuracy-relevant option set built all-quantized), then the layers ranked
for the best variant only (tuner.analysis.sensitivity) and its greedy float set. Stored in the study's settings;
the ranking names its variant, and the keep-in-float search exists only under it (tuner.inputs.space.normalize).

A route whose every variant fails to build is dropped with one note, and the study goes on with the rest.
No layer is ranked where it would not pay: when the chosen variant meets the requirement with every layer
quantized (its greedy set is empty), or when no variant is faster than the fp32 engine beyond the noise (the
route gate: timed in turn with it; keeping layers in float only adds float work to an engine already no
faster than float)."""
from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable

from ..errors import TrialFailure, UserError
from ..execute.jobs import Evaluator, OutOfTime
from ..inputs.configs import effective_encoding, layer_candidates
from ..inputs.space import ROUTE_KEY, LayerOverride
from ..problem.spec import Problem
from ..report.progress import progress_printer
from ..report.variants import variant_lines
from .sensitivity import DEFAULT_BUDGET, ranking_for_study
from .variants import carried_settings, choose, measure_variants, variant_setups

# The route gate: layers are ranked only for a route whose fastest variant, every layer quantized, is faster
# than the fp32 engine beyond the noise (its ratio's 95% interval, timed in turn with it, lies below this).
# Keeping layers in float only adds float work and conversions to a quantized engine, so a route that is not
# faster all-quantized cannot win by them. OpenVINO's all-int8 variants on an AVX2 CPU without VNNI ran
# 1.19-1.24x its fp32 engine (issue 40), and ranking their layers cost 20 minutes; where VNNI kernels win
# (0.68x on an AVX-512 VNNI CPU) the route is ranked. The route stays in the space for TPE either way.
NOT_FASTER = 1.0


def slower_than_fp32(rows: list[dict]) -> dict | None:
    """The fastest variant row (ratio to the fp32 engine, timed in turn) among those that let a layer stay in
    float, where even it is not faster than fp32 beyond its interval (no layer is ranked then); else None."""
    timed = [r for r in rows if r.get("layers") and r.get("ratio")]
    if not timed:
        return None
    fastest = min(timed, key=lambda r: r["ratio"])
    top = (fastest.get("ratio_ci") or [fastest["ratio"]] * 2)[1]  # a row cached without its interval: the ratio
    return fastest if top >= NOT_FASTER else None


def gate_line(label: str, row: dict) -> str:
    """Why a route's layers are not ranked, with both figures."""
    lo, hi = row.get("ratio_ci") or [row["ratio"]] * 2
    ms = f" ({row['ms']:.2f} ms against {row['fp32_ms']:.2f} ms)" if row.get("ms") and row.get("fp32_ms") else ""
    return (f"{label}: its fastest variant, every layer quantized, runs at {row['ratio']:.2f}x [95% {lo:.2f}-{hi:.2f}] "
            f"the fp32 engine's latency{ms}, timed in turn: keeping layers in float cannot make it faster, so no layer "
            "is ranked; the route stays in the space for the search")


def _without_layers(override: LayerOverride, config: dict, common: dict, **why) -> dict:
    """A ranking with no layer in it: every layer of the route stays quantized in the study."""
    key = hashlib.sha256(json.dumps([override.name, config, why], sort_keys=True, default=str).encode()).hexdigest()[:16]
    return common | {"override": override.name, "route": config, "table_key": f"variant-{key}", "order": [], "cut": 0,
                     "greedy_builds": 0, "nodes": {}} | why


def override_ranking(problem: Problem, override: LayerOverride, evaluator: Evaluator,
                     on_progress: Callable[[str], None] = lambda s: None, budget: int | None = DEFAULT_BUDGET,
                     method: str = "activations") -> dict:
    """override_ranking_of, or, where the evaluator's deadline (the study's --timeout) passed during it, a ranking
    with no layer that says so: the study goes on with its trials, every layer of the route quantized."""
    try:
        return override_ranking_of(problem, override, evaluator, on_progress, budget, method)
    except OutOfTime:
        backend = problem.space.backends_of(override.when)[0]
        config = {"backend": backend, "precision": override.sensitivity_route}
        return _without_layers(override, config, {"backend": backend, "metric": problem.requirement.primary_metric,
                                                  "variants": [], "analysis_builds": 0, "analysis_s": 0.0},
                               greedy_feasible=False, variant={},
                               skipped="the study's --timeout ran out during the analysis; every layer stays quantized")


def override_ranking_of(problem: Problem, override: LayerOverride, evaluator: Evaluator,
                        on_progress: Callable[[str], None] = lambda s: None, budget: int | None = DEFAULT_BUDGET,
                        method: str = "activations") -> dict:
    """The stored ranking of one override: the variant table, the chosen variant's options (`variant`)
    and, where the layers were ranked, the order and greedy cut (tuner.analysis.sensitivity.ranking_for_study).
    dropped: the note of a route that does not build; skipped: why no layer was ranked."""
    backend = problem.space.backends_of(override.when)[0]
    setups = variant_setups(problem, override, override.sensitivity_route, backend, {})
    measured = measure_variants(problem, setups, evaluator, on_progress)
    rows = measured["rows"]
    pick = choose(rows)
    for i, row in enumerate(rows):
        row["chosen"] = i == pick
    common = {"backend": backend, "metric": problem.requirement.primary_metric, "variants": rows, "fp32_ms": measured["fp32_ms"],
              "settings": carried_settings(setups, problem), "analysis_builds": measured["builds"],
              "analysis_s": measured["seconds"]}
    first = {k: v for k, v in setups[0]["config"].items() if k != override.key}
    label = f"{backend} {first[ROUTE_KEY]}"
    if all("failed" in r for r in rows):
        return _without_layers(override, first, common, greedy_feasible=False, variant=rows[0]["options"],
                               dropped=f"{label} does not build on this model ({rows[0]['failed']}): dropped from the "
                                       "analysis; its trials fail and the study learns their route, the other routes go on")
    if pick is None:
        return _without_layers(override, first, common, greedy_feasible=False, variant=rows[0]["options"],
                               skipped="no variant that builds lets a layer stay in float")
    chosen, config = rows[pick], {k: v for k, v in setups[pick]["config"].items() if k != override.key}
    metric = common["metric"]
    if chosen["feasible"]:
        return _without_layers(override, config, common, greedy_feasible=True, variant=chosen["options"],
                               skipped=f"every layer quantized meets the requirement ({metric} {chosen['error']:.4g})")
    fastest = slower_than_fp32(rows)
    if fastest is not None:
        return _without_layers(override, config, common, greedy_feasible=False, variant=chosen["options"],
                               skipped=gate_line(label, fastest))
    left = None if budget is None else budget - measured["builds"]
    if left is not None and left < 4:
        return _without_layers(override, config, common, greedy_feasible=False, variant=chosen["options"],
                               skipped=f"the variants took the analysis budget ({budget} builds; --sensitivity-budget)")
    try:
        ranking = ranking_for_study(problem, config, override, evaluator, on_progress, left,
                                    known={"error_all_quantized": chosen["error"]}, method=method)
    except (UserError, TrialFailure) as exc:  # a build of the ranking failed: the variant itself still builds
        return _without_layers(override, config, common, greedy_feasible=False, variant=chosen["options"],
                               skipped=f"a build of the ranking failed ({exc}); every layer stays quantized")
    return ranking | {k: v for k, v in common.items() if k not in ("analysis_builds", "analysis_s")} | {
        "variant": chosen["options"],
        "analysis_builds": ranking["analysis_builds"] + measured["builds"],
        "analysis_s": round(ranking["analysis_s"] + measured["seconds"], 1)}


def study_rankings(problem: Problem, timeout_s: float = 600.0, quiet: bool = True,
                   budget: int | None = DEFAULT_BUDGET, method: str = "activations", deadline: float | None = None,
                   on_ranking: Callable[[str, dict], None] = lambda name, ranking: None,
                   log_path: str | None = None) -> dict[str, dict]:
    """For each override the sensitivity encoding applies to (`sensitivity`, or `auto` on a model with
    many candidates): its variants, then its ranking. Computed once per study and stored in it. Each ranking
    goes to on_ranking as soon as it is made; deadline: time.monotonic() past which no build starts; log_path:
    where the builds' own output goes (the study's trials log; None: the terminal)."""
    out = {}
    wanted = [o for o in problem.space.overrides if effective_encoding(o, problem.graph_nodes) == "sensitivity"]
    if not wanted:
        return out
    started = time.perf_counter()
    printer = progress_printer(quiet, log_lines=True)
    with Evaluator(problem.loaded, timeout_s, persistent=True, deadline=deadline, log_path=log_path) as evaluator:

        def progress(message: str) -> None:  # what the analysis does, and what it has spent so far
            printer(f"analysis {_elapsed(time.perf_counter() - started)}: {message}")

        for o in wanted:
            if not quiet:
                n = len(layer_candidates(o, problem.graph_nodes))
                print(f"{o.name}: the route variants of {o.sensitivity_route} (every layer quantized), then its {n} "
                      f"candidates ranked ({method}) for the best variant, once per study (at most "
                      f"{budget or 'no cap on the'} builds; --sensitivity-budget)", file=sys.stderr)
            begun = time.perf_counter()
            out[o.name] = r = override_ranking(problem, o, evaluator, progress, budget, method)
            on_ranking(o.name, r)
            if not quiet:
                print("\r" + "\n".join(variant_lines(o.name, r)) +
                      f"\n  ({r['analysis_builds']} analysis builds, {time.perf_counter() - begun:.0f} s)", file=sys.stderr)
    return out


def _elapsed(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def ranking_notes(rankings: dict | None) -> list[str]:
    """The notes of dropped routes, for the study's notes (said once, stored, shown in the report)."""
    return [r["dropped"] for r in (rankings or {}).values() if r.get("dropped")]
