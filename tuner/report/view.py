"""What a report shows, computed apart from the drawing: one snapshot of a study, its Pareto front,
importances, per-layer override rates and the summary rows. Reads a study without writing to it."""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from ..search.failures import learnt_failures
from ..search.settings import SETTINGS_ATTR, StudySettings, readable_settings
from ..search.trials import baseline_modes, is_feasible, latency_of, relative_of, speedup_of, was_busy, work_line
from .as_run import (
    computed_text,
    deployed_text,
    float_word,
    not_deployed_lines,
    precision_text,
    serving_text,
    vs_defaults_text,
    workload_lines,
)
from .finalists import finalist_rows
from .variants import variant_lines

LAYER_PREFIX_SEP = "/"


NEAR_FRONT_RANKS = 2  # the layer map looks at the first two non-dominated layers of the feasible trials


@dataclass
class StudyView:
    """One consistent snapshot of a study: the trials as they were when it was taken."""

    study: optuna.Study
    trials: list[FrozenTrial]
    settings: StudySettings
    bounds: list[tuple[str, float]]  # (metric, limit) of the requirement, primary first
    user_attrs: dict  # the study's, read with the trials

    @classmethod
    def of(cls, study: optuna.Study | StudyView) -> StudyView:
        if isinstance(study, StudyView):
            return study
        attrs = study.user_attrs
        settings = readable_settings(attrs.get(SETTINGS_ATTR))
        bounds = [(b.metric, b.limit) for b in settings.requirement.bounds]
        return cls(study, study.get_trials(deepcopy=False), settings, bounds, attrs)

    @property
    def name(self) -> str:
        return self.study.study_name

    @property
    def primary_metric(self) -> str:
        return self.bounds[0][0] if self.bounds else "cos"

    @property
    def requirement(self) -> str:
        return ",".join(f"{m}<={v:g}" for m, v in self.bounds)

    @property
    def complete(self) -> list[FrozenTrial]:
        return [t for t in self.trials if t.state == TrialState.COMPLETE and t.values]

    @property
    def feasible(self) -> list[FrozenTrial]:
        return [t for t in self.complete if is_feasible(t)]

    def error(self, t: FrozenTrial) -> float:
        metrics = t.user_attrs.get("metrics") or {}
        if self.primary_metric in metrics:
            return float(metrics[self.primary_metric])
        return float(t.values[1]) if t.values and len(t.values) > 1 else float("nan")

    @property
    def paired(self) -> bool:
        """Trials timed against the baseline (paired timing): their latency is a ratio to it."""
        return self.settings.paired

    @property
    def latency_label(self) -> str:
        return ("latency relative to the baseline (paired timing)" if self.paired else "latency, median (ms)")

    def latency(self, t: FrozenTrial) -> float:
        """What the study ranks by: the ratio to the baseline under paired timing, else the median ms."""
        lat = relative_of(t) if self.paired else latency_of(t)
        return lat if lat is not None and math.isfinite(lat) else float(t.values[0])

    def axis_text(self, value: float) -> str:
        """A value on the latency axis as text: a ratio to the baseline (paired) as its speedup, else ms."""
        return f"{1 / value:.2f}x the baseline" if self.paired and value > 0 else f"{value:.3f} ms"

    def latency_text(self, t: FrozenTrial) -> str:
        """A search figure as every output writes it: the speedup over the baseline, milliseconds beside it."""
        if t.user_attrs.get("baseline"):  # timed against itself it reads 0.93x or 1.07x: noise, not a result
            return f"the baseline ({latency_of(t):.3f} ms)"
        up = speedup_of(t, self.baseline)
        return f"{up:.2f}x the baseline ({latency_of(t):.3f} ms)" if up else f"{latency_of(t):.3f} ms"

    @property
    def baseline(self) -> FrozenTrial | None:
        return next((t for t in self.complete if t.user_attrs.get("baseline")), None)

    @property
    def winner(self) -> dict | None:
        return self.user_attrs.get("winner")

    def trial(self, number: int) -> FrozenTrial | None:
        return next((t for t in self.trials if t.number == number), None)


def route_of(t: FrozenTrial) -> str:
    """The precision route, with the backend in a study over several ("openvino int8")."""
    config = t.user_attrs.get("config") or {}
    route = str(config.get("precision", t.params.get("precision", "?")))
    return f"{config['backend']} {route}" if "backend" in config else route


def _computed(t: FrozenTrial) -> str:
    """", computed as fp32 (...)": what the trial's engine ran, as its runtime said ("" where it did not)."""
    text = computed_text(t.user_attrs.get("precision"), (t.user_attrs.get("config") or {}).get("precision"))
    return f", {text}" if text else ""


def _is_layer_param(name: str) -> bool:
    return LAYER_PREFIX_SEP in name


def _main_params(t: FrozenTrial) -> dict:
    config = t.user_attrs.get("config") or dict(t.params)
    return {k: v for k, v in config.items() if not isinstance(v, list) and not _is_layer_param(k)}


def _kept_in_float(t: FrozenTrial) -> int:
    config = t.user_attrs.get("config") or {}
    return sum(len(v) for v in config.values() if isinstance(v, list))


def pareto_front(points: list[tuple[float, float, FrozenTrial]]) -> list[FrozenTrial]:
    """The non-dominated trials of (latency, error, trial) points, by latency."""
    front = []
    for a in points:
        dominated = any(b[0] <= a[0] and b[1] <= a[1] and (b[0] < a[0] or b[1] < a[1]) for b in points)
        if not dominated:
            front.append(a)
    return [p[2] for p in sorted(front, key=lambda p: (p[0], p[1], p[2].number))]


def pareto_ranks(points: list[tuple[float, float, FrozenTrial]], ranks: int) -> list[list[FrozenTrial]]:
    """The first `ranks` non-dominated layers (rank 1 = the front, rank 2 = the front without it, ...)."""
    left, out = list(points), []
    for _ in range(ranks):
        if not left:
            break
        layer = pareto_front(left)
        out.append(layer)
        ids = {t.number for t in layer}
        left = [p for p in left if p[2].number not in ids]
    return out


def _elapsed_s(view: StudyView, t: FrozenTrial) -> float | None:
    starts = [x.datetime_start for x in view.trials if x.datetime_start]
    if not starts or t.datetime_complete is None:
        return None
    return (t.datetime_complete - min(starts)).total_seconds()


def importance_evaluator():
    """Optuna's default evaluator (PED-ANOVA in Optuna 5): fANOVA would need scikit-learn."""
    return optuna.importance.PedAnovaImportanceEvaluator()


def importances(study, evaluator=None) -> dict[str, dict[str, float]]:
    """{'latency': {param: importance}, 'error': {...}} over the completed trials (empty dicts where too few)."""
    view = StudyView.of(study)
    evaluator = evaluator or importance_evaluator()
    out: dict[str, dict[str, float]] = {}
    done = view.complete
    for name, target in (("latency", view.latency), ("error", view.error)):
        names = {p for t in done for p in t.params}
        if len(done) < 2 or not any(len({repr(t.params.get(p)) for t in done}) > 1 for p in names):
            out[name] = {}
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                out[name] = optuna.importance.get_param_importances(
                    view.study, evaluator=evaluator, target=lambda t, f=target: _finite(f(t)))
            except (ValueError, RuntimeError, ZeroDivisionError):
                out[name] = {}
    return out


def _finite(v: float, cap: float = 1e30) -> float:
    return cap if not math.isfinite(v) else min(v, cap)


def float_layers(t: FrozenTrial) -> list[str]:
    """The model's layers (node names) the trial keeps in float: its config's per-layer lists, however the
    search encoded them (one boolean per node or group, or a ranking's top k)."""
    config = t.user_attrs.get("config") or {}
    return sorted({n for v in config.values() if isinstance(v, list) for n in v})


def layer_override_rates(study, ranks: int = NEAR_FRONT_RANKS) -> tuple[list[FrozenTrial], dict[str, float]]:
    """The feasible trials near the front that use per-layer overrides, and per layer (node name, e.g.
    'block1/ffn/fc1') the fraction of them that keep it in float, most often kept first."""
    view = StudyView.of(study)
    with_layers = [t for t in view.feasible if any(_is_layer_param(k) for k in t.params)]
    points = [(view.latency(t), view.error(t), t) for t in with_layers]
    near = [t for layer in pareto_ranks(points, ranks) for t in layer]
    if len(near) < 3:  # too few to speak of rates: use every feasible trial with overrides
        near = with_layers
    near = sorted(near, key=lambda t: t.number)
    kept = {t.number: set(float_layers(t)) for t in near}
    layers = sorted({n for nodes in kept.values() for n in nodes})
    rates = {n: sum(n in kept[t.number] for t in near) / len(near) for n in layers}
    return near, dict(sorted(rates.items(), key=lambda kv: -kv[1]))


def _fmt_s(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def sensitivity_rows(study) -> list[tuple[str, list[dict], int, str]]:
    """Per ranked override: (its route, its sensitivity table, most sensitive first, the greedy cut, its method)."""
    view = StudyView.of(study)
    out = []
    for ranking in (view.settings.rankings or {}).values():
        if ranking.get("entries"):
            route = " ".join(str(v) for k, v in (ranking.get("route") or {}).items() if k in ("backend", "precision"))
            by_name = {e["name"]: e for e in ranking["entries"]}
            ordered = [by_name[n] for n in ranking.get("order", []) if n in by_name]  # greedy set first
            out.append((route, ordered or ranking["entries"], int(ranking.get("cut") or 0),
                        ranking.get("method") or "builds"))
    return out


def summary_rows(study) -> list[tuple[str, str]]:
    """(label, value) rows: settings, trials by state, baseline, winner, speedup, error, tuning time."""
    view = StudyView.of(study)
    s, trials, done = view.settings, view.trials, view.complete
    by_state: dict[str, int] = {}
    for t in trials:
        by_state[t.state.name.lower()] = by_state.get(t.state.name.lower(), 0) + 1
    feasible = view.feasible
    rows = [("study", view.name),
            ("model", str(s.model_path or "?")),
            ("requirement", view.requirement or "none"),
            ("objectives", s.objectives.value),
            ("sampler", s.sampler),
            ("trials by state", ", ".join(f"{k} {v}" for k, v in sorted(by_state.items())) or "none"),
            ("feasible / infeasible", f"{len(feasible)} / {len(done) - len(feasible)}"
             + (" - no trial meets the requirement" if done and not feasible else "")),
            ("work", work_line(trials, s.rankings) + f"; timing {s.timing.value}{serving_text(s.spec)}")]
    for name, ranking in (s.rankings or {}).items():  # the route variants before the layers (tuner.analysis.variants)
        lines = variant_lines(name, ranking)
        if lines:
            rows.append(("route variants", lines[0].rstrip(":")))
            rows += [("variant", line.strip()) for line in lines[1:-1]]
            rows.append(("layers", lines[-1].strip()))
    busy = [t.number for t in done if was_busy(t)]
    if busy:
        rows.append(("busy machine", f"{len(busy)} trial(s) timed while other processes kept the machine busy "
                                     f"(trials {', '.join(map(str, busy[:12]))}{' ...' if len(busy) > 12 else ''}): "
                                     "their latencies read slow"))
    for f in learnt_failures(view.user_attrs):
        rows.append(("route that does not build", f"{f['choice']} (trial {f['trial']}, not built again): {f['reason']}"))
    base = view.baseline
    if base is not None:
        rows.append(("baseline", f"trial {base.number}: {view.latency_text(base)}, "
                                 f"{view.primary_metric} {view.error(base):.3g}, precision {route_of(base)}"
                                 + _computed(base)))
    else:
        rows.append(("baseline", "not measured yet"))
    winner = view.winner
    if winner:
        conf = winner.get("confirmed_latency") or {}
        metrics = winner.get("confirmed_metrics") or winner.get("metrics") or {}
        err = metrics.get(view.primary_metric)
        speed = f"{winner['speedup']:.2f}x the baseline, " if winner.get("speedup") else ""
        rows.append(("winner", f"trial {winner['trial']}: {speed}confirmed side by side "
                               f"({conf.get('median_ms', float('nan')):.3f} ms, 95% CI {conf.get('ci_low_ms', float('nan')):.3f}-"
                               f"{conf.get('ci_high_ms', float('nan')):.3f}), "
                               + precision_text(winner.get("config"), winner.get("precision"))))
        base_conf = (winner.get("baseline_latency") or {}).get("median_ms")
        rows.append(("speedup", f"{winner['speedup']:.2f}x the baseline ({base_conf:.3f} ms, timed side by side)"
                     if winner.get("speedup") and base_conf else "n/a"))
        rows += [("speedup per set of shapes", line) for line in workload_lines(winner.get("confirmed_workload"), "")]
        against = vs_defaults_text(winner)
        if against:
            rows.append(("against each runtime's defaults", against))
        deployed = deployed_text(winner.get("deployed"), winner.get("speedup"))
        if deployed:
            rows.append(("deployment check", deployed))
        rows += [("not the winner", line) for line in not_deployed_lines(winner)]
        kept = float_layers(view.trial(winner["trial"])) if view.trial(winner["trial"]) else []
        floats = float_word(winner.get("precision"))
        here = f" ({floats} here)" if floats and floats != "fp32" else ""
        rows.append(("winner's float layers", (f"{len(kept)}{here}: " + ", ".join(kept[:24]) + (" ..." if len(kept) > 24 else ""))
                     if kept else "none: every quantizable layer of its route is quantized (or its route is a float one)"))
        rows.append(("winner error", f"{view.primary_metric} {err:.3g}" + (
            f" (limit {view.bounds[0][1]:g})" if view.bounds else "") if err is not None else "n/a"))
        rows += [(f"finalist {label}" if label != "tie" else "tie within noise", text)
                 for label, text in finalist_rows(winner)]
        if (winner.get("load") or {}).get("busy"):
            rows.append(("selection", f"chosen while other processes used {winner['load']['other_cores']:.1f} cores: "
                                      "run tuner select again on a quiet machine"))
        if winner.get("verify"):
            v = winner["verify"]
            rows.append(("verify", f"{v['speedup']:.2f}x the defaults, each engine in a fresh process (95% "
                                   f"{v['speedup_low']:.2f}-{v['speedup_high']:.2f})"
                                   + (" - machine busy" if v.get("busy") else "")))
            if v.get("alone"):
                rows.append(("verify alone", deployed_text(v["alone"], v.get("claimed_speedup"))))
    else:
        if "winner" in view.user_attrs:
            best = view.user_attrs.get("best_effort")
            rows.append(("winner", "none: no trial meets the requirement" + (
                f"; closest is trial {best['trial']} (export with --best-effort)" if best else "")))
        else:
            rows.append(("winner", "not selected yet (tuner select)"))
        rows.append(("speedup", "n/a"))
    if feasible:
        best = min(feasible, key=view.latency)
        rows.append(("fastest feasible in the search", f"trial {best.number}: {view.latency_text(best)}, "
                                                       f"{view.primary_metric} {view.error(best):.3g}"))
    starts = [t.datetime_start for t in trials if t.datetime_start]
    ends = [t.datetime_complete for t in trials if t.datetime_complete]
    if starts and ends:
        busy = sum((t.datetime_complete - t.datetime_start).total_seconds()
                   for t in trials if t.datetime_start and t.datetime_complete)
        rows.append(("total tuning time", f"{_fmt_s((max(ends) - min(starts)).total_seconds())} from the first trial's "
                                          f"start to the last trial's end ({_fmt_s(busy)} inside trials)"))
    rows += [("note", note) for note in s.notes]
    modes = baseline_modes(trials)
    if modes:
        rows.append(("baseline processes", modes))
    running = by_state.get("running", 0)
    if running:
        rows.append(("note", f"{running} trial(s) running: the study is still being tuned; this report is a snapshot"))
    return rows
