"""What a report shows, computed apart from the drawing: one snapshot of a study, its Pareto front,
importances, per-layer override rates and the summary rows. Reads a study without writing to it."""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from ..search.failures import learnt_failures
from ..search.record import StoredStudy, StoredTrial, Winner
from ..search.settings import StudySettings, readable_settings
from ..search.trials import baseline_modes, is_feasible, latency_of, relative_of, speedup_of, was_busy, work_line
from .as_run import computed_text, kept_layers, serving_text
from .variants import variant_lines
from .winner_facts import winner_facts

LAYER_PREFIX_SEP = "/"


NEAR_FRONT_RANKS = 2  # the layer map looks at the first two non-dominated layers of the feasible trials


@dataclass
class StudyView:
    """One consistent snapshot of a study: the trials as they were when it was taken."""

    study: optuna.Study
    trials: list[FrozenTrial]
    settings: StudySettings
    bounds: list[tuple[str, float]]  # (metric, limit) of the requirement, primary first
    stored: StoredStudy  # the study's attributes, read with the trials

    @classmethod
    def of(cls, study: optuna.Study | StudyView) -> StudyView:
        if isinstance(study, StudyView):
            return study
        stored = StoredStudy.of(study)
        settings = readable_settings(stored.settings)
        bounds = [(b.metric, b.limit) for b in settings.requirement.bounds]
        return cls(study, study.get_trials(deepcopy=False), settings, bounds, stored)

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
        metrics = StoredTrial.of(t).metrics
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
        if StoredTrial.of(t).baseline:  # timed against itself it reads 0.93x or 1.07x: noise, not a result
            return f"the baseline ({latency_of(t):.3f} ms)"
        up = speedup_of(t, self.baseline)
        return f"{up:.2f}x the baseline ({latency_of(t):.3f} ms)" if up else f"{latency_of(t):.3f} ms"

    @property
    def baseline(self) -> FrozenTrial | None:
        return next((t for t in self.complete if StoredTrial.of(t).baseline), None)

    @property
    def winner(self) -> Winner | None:
        return self.stored.winner

    def trial(self, number: int) -> FrozenTrial | None:
        return next((t for t in self.trials if t.number == number), None)


def route_of(t: FrozenTrial) -> str:
    """The precision route, with the backend in a study over several ("openvino int8")."""
    config = StoredTrial.of(t).config
    route = str(config.get("precision", t.params.get("precision", "?")))
    return f"{config['backend']} {route}" if "backend" in config else route


def _computed(t: FrozenTrial) -> str:
    """", computed as fp32 (...)": what the trial's engine ran, as its runtime said ("" where it did not)."""
    rec = StoredTrial.of(t)
    text = computed_text(rec.precision, rec.config.get("precision"))
    return f", {text}" if text else ""


def _is_layer_param(name: str) -> bool:
    return LAYER_PREFIX_SEP in name


def _main_params(t: FrozenTrial) -> dict:
    config = StoredTrial.of(t).config or dict(t.params)
    return {k: v for k, v in config.items() if not isinstance(v, list) and not _is_layer_param(k)}


def _kept_in_float(t: FrozenTrial) -> int:
    config = StoredTrial.of(t).config
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
    return kept_layers(StoredTrial.of(t).config)


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
    """(label, value) rows: settings, trials by state, baseline, the winner (report.winner_facts), tuning time."""
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
    for f in learnt_failures(view.stored.attrs):
        rows.append(("route that does not build", f"{f['choice']} (trial {f['trial']}, not built again): {f['reason']}"))
    base = view.baseline
    if base is not None:
        rows.append(("baseline", f"trial {base.number}: {view.latency_text(base)}, "
                                 f"{view.primary_metric} {view.error(base):.3g}, precision {route_of(base)}"
                                 + _computed(base)))
    else:
        rows.append(("baseline", "not measured yet"))
    rows += [(f.label, f.text) for f in winner_facts(view.stored, view.name, names=True)]
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
