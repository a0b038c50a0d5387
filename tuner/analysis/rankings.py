"""What a study measures before its first trial, per override with the sensitivity encoding: the route's
variants (tuner.analysis.variants: every accuracy-relevant option set built all-quantized), then the layers ranked
for the best variant only (tuner.analysis.sensitivity) and its greedy float set. Stored in the study's settings;
the ranking names its variant, and the keep-in-float search exists only under it (tuner.inputs.space.normalize).

A route whose every variant fails to build is dropped with one note, and the study goes on with the rest.
No layer is ranked where it would not pay: when the chosen variant meets the requirement with every layer
quantized (its greedy set is empty), or when every variant is clearly slower than the fp32 engine (timed
in turn with it: keeping layers in float only adds float work to an engine already slower than float)."""
from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable

from ..errors import UserError
from ..execute.isolate import TrialFailure
from ..execute.jobs import Evaluator
from ..inputs.configs import effective_encoding, layer_candidates
from ..inputs.space import ROUTE_KEY, LayerOverride
from ..problem.spec import Problem
from ..report.progress import progress_printer
from ..report.variants import variant_lines
from .sensitivity import DEFAULT_BUDGET, ranking_for_study
from .variants import carried_settings, choose, measure_variants, variant_setups

# No layer is ranked for a route whose fastest variant, every layer quantized, runs this much slower than
# the fp32 engine (timed in turn in one job: tuner.analysis.variants): keeping layers in float mostly adds float work
# and conversions to it. A margin, as a few layers could still gain where the rest lose; OpenVINO's int8 on
# an AVX2 CPU without VNNI ran 1.7x slower than its fp32 (0.58x, bench/README.md), the case this skips.
NOT_FASTER = 1.2


def slower_than_fp32(rows: list[dict]) -> float | None:
    """The fastest ratio to the fp32 engine (timed in turn) among the variant rows that let a layer stay in
    float, where it is above NOT_FASTER (no layer is ranked then); else None."""
    fastest = min((r["ratio"] for r in rows if r.get("layers") and r.get("ratio")), default=None)
    return fastest if fastest and fastest > NOT_FASTER else None


def _without_layers(override: LayerOverride, config: dict, common: dict, **why) -> dict:
    """A ranking with no layer in it: every layer of the route stays quantized in the study."""
    key = hashlib.sha256(json.dumps([override.name, config, why], sort_keys=True, default=str).encode()).hexdigest()[:16]
    return common | {"override": override.name, "route": config, "table_key": f"variant-{key}", "order": [], "cut": 0,
                     "greedy_builds": 0, "nodes": {}} | why


def override_ranking(problem: Problem, override: LayerOverride, evaluator: Evaluator,
                     on_progress: Callable[[str], None] = lambda s: None, budget: int | None = DEFAULT_BUDGET) -> dict:
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
                               skipped=f"its fastest variant, every layer quantized, runs at {fastest:.2f}x the fp32 "
                                       "engine's latency (timed in turn): keeping layers in float would not make it faster")
    left = None if budget is None else budget - measured["builds"]
    if left is not None and left < 4:
        return _without_layers(override, config, common, greedy_feasible=False, variant=chosen["options"],
                               skipped=f"the variants took the analysis budget ({budget} builds; --sensitivity-budget)")
    try:
        ranking = ranking_for_study(problem, config, override, evaluator, on_progress, left,
                                    known={"error_all_quantized": chosen["error"]})
    except (UserError, TrialFailure) as exc:  # a build of the ranking failed: the variant itself still builds
        return _without_layers(override, config, common, greedy_feasible=False, variant=chosen["options"],
                               skipped=f"a build of the ranking failed ({exc}); every layer stays quantized")
    return ranking | {k: v for k, v in common.items() if k not in ("analysis_builds", "analysis_s")} | {
        "variant": chosen["options"],
        "analysis_builds": ranking["analysis_builds"] + measured["builds"],
        "analysis_s": round(ranking["analysis_s"] + measured["seconds"], 1)}


def study_rankings(problem: Problem, timeout_s: float = 600.0, quiet: bool = True,
                   budget: int | None = DEFAULT_BUDGET) -> dict[str, dict]:
    """For each override the sensitivity encoding applies to (`sensitivity`, or `auto` on a model with
    many candidates): its variants, then its ranking. Computed once per study and stored in it."""
    out = {}
    wanted = [o for o in problem.space.overrides if effective_encoding(o, problem.graph_nodes) == "sensitivity"]
    if not wanted:
        return out
    progress = progress_printer(quiet, log_lines=True)
    with Evaluator(problem.spec, timeout_s, persistent=True) as evaluator:
        for o in wanted:
            if not quiet:
                n = len(layer_candidates(o, problem.graph_nodes))
                print(f"{o.name}: the route variants of {o.sensitivity_route} (every layer quantized), then its {n} "
                      f"candidates ranked by sensitivity for the best variant, once per study (at most "
                      f"{budget or 'no cap on the'} builds; --sensitivity-budget)", file=sys.stderr)
            started = time.perf_counter()
            out[o.name] = r = override_ranking(problem, o, evaluator, progress, budget)
            if not quiet:
                print("\r" + "\n".join(variant_lines(o.name, r)) +
                      f"\n  ({r['analysis_builds']} analysis builds, {time.perf_counter() - started:.0f} s)", file=sys.stderr)
    return out


def ranking_notes(rankings: dict | None) -> list[str]:
    """The notes of dropped routes, for the study's notes (said once, stored, shown in the report)."""
    return [r["dropped"] for r in (rankings or {}).values() if r.get("dropped")]
