"""The figures of `tuner report` (tuner/report.py): one self-contained HTML file (plotly.js inlined, works offline) describing a study,
and the same figures as Python functions for notebooks.

Every function reads the study without writing to it, so it works on a study another process is
still tuning (RUNNING trials are counted and otherwise skipped). Where a chart cannot say anything
(no feasible trial, too few trials), the figure carries a plain note instead: `note_of(fig)` gives it,
and the HTML shows the note as text in the chart's place.
"""
from __future__ import annotations

import datetime as _dt
import html
import math
import os
import re
import warnings
from dataclasses import dataclass

import optuna
import plotly
import plotly.graph_objects as go
from optuna.trial import FrozenTrial, TrialState
from plotly.subplots import make_subplots

from .errors import UserError
from .study import SETTINGS_ATTR, is_feasible, latency_of

LAYER_PREFIX_SEP = "/"
NEAR_FRONT_RANKS = 2  # the layer map looks at the first two non-dominated layers of the feasible trials
MAX_IMPORTANCE_PARAMS = 15
ROUTE_COLORS = {"fp32": "#1f77b4", "fp16": "#2ca02c", "int8-dynamic": "#ff7f0e", "int8-static": "#d62728",
                "int4-weight": "#9467bd"}
OTHER_COLORS = ["#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
_REQ = re.compile(r"^\s*([A-Za-z_][\w.]*(?::[A-Za-z_]\w*)?)\s*<=\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")


# ---------------------------------------------------------------- reading the study once


@dataclass
class StudyView:
    """One consistent snapshot of a study: the trials as they were when it was taken."""

    study: optuna.Study
    trials: list[FrozenTrial]
    settings: dict
    bounds: list[tuple[str, float]]  # (metric, limit) of the requirement, primary first
    user_attrs: dict  # the study's, read with the trials

    @classmethod
    def of(cls, study: "optuna.Study | StudyView") -> "StudyView":
        if isinstance(study, StudyView):
            return study
        attrs = study.user_attrs
        settings = attrs.get(SETTINGS_ATTR) or {}
        return cls(study, study.get_trials(deepcopy=False), settings, parse_bounds(settings.get("require")), attrs)

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

    def latency(self, t: FrozenTrial) -> float:
        lat = latency_of(t)
        return lat if math.isfinite(lat) else float(t.values[0])

    @property
    def baseline(self) -> FrozenTrial | None:
        return next((t for t in self.complete if t.user_attrs.get("baseline")), None)

    @property
    def winner(self) -> dict | None:
        return self.user_attrs.get("winner")

    def trial(self, number: int) -> FrozenTrial | None:
        return next((t for t in self.trials if t.number == number), None)


def parse_bounds(text: str | None) -> list[tuple[str, float]]:
    """'cos<=0.005,l1<=0.1' -> [('cos', 0.005), ('l1', 0.1)] (no import of user metrics)."""
    out = []
    for part in re.split(r"[,;]|\band\b", text or ""):
        m = _REQ.match(part)
        if m:
            out.append((m.group(1), float(m.group(2))))
    return out


def route_of(t: FrozenTrial) -> str:
    return str((t.user_attrs.get("config") or {}).get("precision", t.params.get("precision", "?")))


def _route_color(route: str, routes: list[str]) -> str:
    if route in ROUTE_COLORS:
        return ROUTE_COLORS[route]
    others = [r for r in routes if r not in ROUTE_COLORS]
    return OTHER_COLORS[others.index(route) % len(OTHER_COLORS)] if route in others else OTHER_COLORS[0]


def _is_layer_param(name: str) -> bool:
    return LAYER_PREFIX_SEP in name


def _main_params(t: FrozenTrial) -> dict:
    config = t.user_attrs.get("config") or dict(t.params)
    return {k: v for k, v in config.items() if not isinstance(v, list) and not _is_layer_param(k)}


def _kept_in_float(t: FrozenTrial) -> int:
    config = t.user_attrs.get("config") or {}
    return sum(len(v) for v in config.values() if isinstance(v, list))


def _hover(view: StudyView, t: FrozenTrial) -> str:
    parts = [f"<b>trial {t.number}</b>", f"latency {view.latency(t):.3f} ms",
             f"{view.primary_metric} {view.error(t):.3g}", "feasible" if is_feasible(t) else "INFEASIBLE"]
    if t.user_attrs.get("baseline"):
        parts.append("baseline (backend defaults)")
    if "reused_from" in t.user_attrs:
        parts.append(f"same build as trial {t.user_attrs['reused_from']}")
    parts += [f"{k}={v}" for k, v in _main_params(t).items()]
    kept = _kept_in_float(t)
    if kept:
        parts.append(f"{kept} nodes kept in float")
    return "<br>".join(parts)


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


# ---------------------------------------------------------------- notes in place of charts


def note_figure(text: str, title: str = "") -> go.Figure:
    """A figure that only says something: the text is in layout.meta['note'] and drawn as an annotation."""
    fig = go.Figure()
    fig.update_layout(title=title, height=220, meta={"note": text},
                      xaxis={"visible": False}, yaxis={"visible": False},
                      annotations=[{"text": html.escape(text), "showarrow": False, "xref": "paper", "yref": "paper",
                                    "x": 0.5, "y": 0.5, "font": {"size": 15}}])
    return fig


def note_of(fig: go.Figure) -> str | None:
    """The note a figure carries (a chart replaced by text, or a warning on a chart), or None."""
    meta = fig.layout.meta
    return meta.get("note") if isinstance(meta, dict) else None


# ---------------------------------------------------------------- the figures


def _error_axis(errors: list[float]) -> tuple[str, float | None]:
    """'log' (with the floor that zero errors are drawn at) where the errors span decades, else 'linear'."""
    finite = [e for e in errors if math.isfinite(e)]
    if not finite or min(finite) < 0:
        return "linear", None
    positive = [e for e in finite if e > 0]
    if not positive:
        return "linear", None
    lo, hi = min(positive), max(positive)
    if hi / lo >= 100 or len(positive) < len(finite):
        return "log", lo / 10
    return "linear", None


def pareto_figure(study) -> go.Figure:
    """Latency (x) against error (y) of every completed trial: colored by precision route, feasible
    filled and infeasible hollow, the feasible Pareto front as a line, the requirement as a line,
    the baseline and the winner marked."""
    view = StudyView.of(study)
    done = view.complete
    title = f"Pareto front: latency vs {view.primary_metric} error"
    if not done:
        return note_figure(f"No completed trial yet in study {view.name!r}: nothing to plot.", title)
    errors = [view.error(t) for t in done]
    yscale, floor = _error_axis(errors + [v for m, v in view.bounds[:1]])

    def y_of(t):
        e = view.error(t)
        if not math.isfinite(e):
            return None
        return max(e, floor) if floor is not None else e

    fig = go.Figure()
    routes = sorted({route_of(t) for t in done})
    for route in routes:
        color = _route_color(route, routes)
        for feasible in (True, False):
            ts = [t for t in done if route_of(t) == route and is_feasible(t) == feasible]
            if not ts:
                continue
            fig.add_trace(go.Scatter(
                x=[view.latency(t) for t in ts], y=[y_of(t) for t in ts], mode="markers",
                name=f"{route} ({'feasible' if feasible else 'infeasible'})", legendgroup=route,
                customdata=[[t.number] for t in ts], hovertext=[_hover(view, t) for t in ts], hoverinfo="text",
                marker={"color": color, "size": 10, "symbol": "circle" if feasible else "x-thin-open",
                        "line": {"width": 2, "color": color}},
                meta={"role": "trials", "route": route, "feasible": feasible}))
    feasible = view.feasible
    front = pareto_front([(view.latency(t), view.error(t), t) for t in feasible])
    if front:
        fig.add_trace(go.Scatter(
            x=[view.latency(t) for t in front], y=[y_of(t) for t in front], mode="lines+markers",
            line={"shape": "hv", "color": "black", "width": 1.5, "dash": "dot"},
            marker={"size": 14, "color": "rgba(0,0,0,0)", "line": {"width": 1.5, "color": "black"}},
            name=f"Pareto front of feasible trials ({len(front)})", customdata=[[t.number] for t in front],
            hovertext=[_hover(view, t) for t in front], hoverinfo="text", meta={"role": "front"}))
    lats = [view.latency(t) for t in done]
    if view.bounds:
        metric, limit = view.bounds[0]
        pad = (max(lats) - min(lats)) * 0.05 or max(lats) * 0.05
        fig.add_trace(go.Scatter(
            x=[min(lats) - pad, max(lats) + pad], y=[limit, limit], mode="lines",
            line={"color": "crimson", "dash": "dash"}, name=f"requirement {metric}<={limit:g}",
            hoverinfo="name", meta={"role": "requirement", "metric": metric, "limit": limit}))
    base = view.baseline
    if base is not None:
        fig.add_trace(go.Scatter(
            x=[view.latency(base)], y=[y_of(base)], mode="markers", name=f"baseline (trial {base.number})",
            marker={"symbol": "square-open", "size": 18, "color": "black", "line": {"width": 2}},
            customdata=[[base.number]], hovertext=[_hover(view, base)], hoverinfo="text", meta={"role": "baseline"}))
    winner = view.winner
    wt = view.trial(winner["trial"]) if winner else None
    if wt is not None and wt.state == TrialState.COMPLETE:
        conf = (winner.get("confirmed_latency") or {}).get("median_ms")
        speed = f", {winner['speedup']:.2f}x baseline" if winner.get("speedup") else ""
        fig.add_trace(go.Scatter(
            x=[view.latency(wt)], y=[y_of(wt)], mode="markers", name=f"winner (trial {wt.number})",
            marker={"symbol": "star", "size": 22, "color": "gold", "line": {"width": 1.5, "color": "black"}},
            customdata=[[wt.number]], hoverinfo="text",
            hovertext=[_hover(view, wt) + (f"<br>confirmed {conf:.3f} ms{speed}" if conf else "")],
            meta={"role": "winner", "confirmed_ms": conf}))
    note = None
    if not feasible:
        note = (f"No feasible trial: none of the {len(done)} completed trials meets "
                f"{view.requirement or 'the requirement'}, so there is no Pareto front and no winner.")
        fig.add_annotation(text=note, showarrow=False, xref="paper", yref="paper", x=0.5, y=1.0, yanchor="bottom",
                           font={"size": 13, "color": "crimson"})
    fig.update_layout(title=title, xaxis_title="latency, median (ms)",
                      yaxis_title=f"{view.primary_metric} error" + (" (log scale)" if yscale == "log" else ""),
                      yaxis_type=yscale, height=560, hovermode="closest", legend={"itemsizing": "constant"},
                      meta={"note": note, "yscale": yscale, "floor": floor} if note else {"yscale": yscale, "floor": floor})
    if floor is not None and any(math.isfinite(e) and e < floor for e in errors):
        fig.add_annotation(text=f"errors below {floor:.1g} (e.g. exact 0) are drawn at {floor:.1g}", showarrow=False,
                           xref="paper", yref="paper", x=1, y=0, xanchor="right", yanchor="bottom", font={"size": 10})
    return fig


def _elapsed_s(view: StudyView, t: FrozenTrial) -> float | None:
    starts = [x.datetime_start for x in view.trials if x.datetime_start]
    if not starts or t.datetime_complete is None:
        return None
    return (t.datetime_complete - min(starts)).total_seconds()


def history_figure(study) -> go.Figure:
    """Best feasible latency so far, against trial number (left) and wall time since the first trial (right)."""
    view = StudyView.of(study)
    title = "Optimization history: best feasible latency"
    done = sorted(view.complete, key=lambda t: t.number)
    if not done:
        return note_figure(f"No completed trial yet in study {view.name!r}.", title)
    if not view.feasible:
        return note_figure(f"No feasible trial: none of the {len(done)} completed trials meets "
                           f"{view.requirement or 'the requirement'}, so there is no best feasible latency to follow.",
                           title)
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, subplot_titles=("by trial number", "by wall time"))
    by_time = sorted(done, key=lambda t: (t.datetime_complete or _dt.datetime.max, t.number))
    for col, order, xf in ((1, done, lambda t: t.number), (2, by_time, lambda t: (_elapsed_s(view, t) or 0) / 60)):
        for feasible in (True, False):
            ts = [t for t in order if is_feasible(t) == feasible]
            if ts:
                fig.add_trace(go.Scatter(
                    x=[xf(t) for t in ts], y=[view.latency(t) for t in ts], mode="markers",
                    name="feasible trial" if feasible else "infeasible trial", legendgroup=str(feasible),
                    showlegend=col == 1, customdata=[[t.number] for t in ts],
                    hovertext=[_hover(view, t) for t in ts], hoverinfo="text",
                    marker={"color": "#1f77b4" if feasible else "#bbbbbb", "size": 8,
                            "symbol": "circle" if feasible else "x-thin-open", "line": {"width": 2}},
                    meta={"role": "trials", "feasible": feasible}), row=1, col=col)
        xs, ys, best = [], [], math.inf
        for t in order:
            if is_feasible(t):
                best = min(best, view.latency(t))
            if math.isfinite(best):
                xs.append(xf(t))
                ys.append(best)
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line={"shape": "hv", "color": "black"},
                                 name="best feasible so far", legendgroup="best", showlegend=col == 1,
                                 meta={"role": "best", "x": "trial" if col == 1 else "minutes"}), row=1, col=col)
    base = view.baseline
    if base is not None:
        fig.add_hline(y=view.latency(base), line_dash="dash", line_color="gray",
                      annotation_text=f"baseline {view.latency(base):.2f} ms", annotation_position="top right")
    fig.update_xaxes(title_text="trial number", row=1, col=1)
    fig.update_xaxes(title_text="minutes since the first trial started", row=1, col=2)
    fig.update_yaxes(title_text="latency, median (ms)", row=1, col=1)
    fig.update_layout(title=title, height=450, hovermode="closest")
    return fig


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


def importance_figure(study, evaluator=None) -> go.Figure:
    """Parameter importances for latency and for error, side by side (top parameters by either)."""
    view = StudyView.of(study)
    evaluator = evaluator or importance_evaluator()
    ev_name = type(evaluator).__name__
    title = f"Parameter importances ({ev_name}, over {len(view.complete)} completed trials)"
    imp = importances(view, evaluator)
    if not imp["latency"] and not imp["error"]:
        return note_figure(f"Too few completed trials ({len(view.complete)}) with varied parameters "
                           f"for parameter importances ({ev_name}); they need at least two.", title)
    names = set(imp["latency"]) | set(imp["error"])
    score = {n: max(imp["latency"].get(n, 0.0), imp["error"].get(n, 0.0)) for n in names}
    top = [n for n in sorted(names, key=lambda n: -score[n]) if score[n] > 0][:MAX_IMPORTANCE_PARAMS]
    if not top:
        return note_figure(f"Every parameter importance is zero ({ev_name}): the trials do not tell the "
                           "parameters apart yet.", title)
    top = top[::-1]  # largest at the top of a horizontal bar chart
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True,
                        subplot_titles=("for latency", f"for error ({view.primary_metric})"))
    for col, (key, color) in enumerate((("latency", "#1f77b4"), ("error", "#d62728")), start=1):
        vals = [imp[key].get(n, 0.0) for n in top]
        fig.add_trace(go.Bar(x=vals, y=top, orientation="h", marker_color=color, name=key,
                             hovertemplate="%{y}: %{x:.3f}<extra>" + key + "</extra>",
                             meta={"role": "importance", "target": key}), row=1, col=col)
    fig.update_xaxes(title_text="importance (normalized)", rangemode="tozero")
    fig.update_layout(title=title, height=max(320, 28 * len(top) + 160), showlegend=False,
                      meta={"evaluator": ev_name})
    return fig


def layer_override_rates(study, ranks: int = NEAR_FRONT_RANKS) -> tuple[list[FrozenTrial], dict[str, float]]:
    """The feasible trials near the front that use per-layer overrides, and per layer parameter
    (e.g. 'keep_float/block1/ffn/fc1') the fraction of them that keep that layer in high precision."""
    view = StudyView.of(study)
    with_layers = [t for t in view.feasible if any(_is_layer_param(k) for k in t.params)]
    points = [(view.latency(t), view.error(t), t) for t in with_layers]
    near = [t for layer in pareto_ranks(points, ranks) for t in layer]
    if len(near) < 3:  # too few to speak of rates: use every feasible trial with overrides
        near = with_layers
    near = sorted(near, key=lambda t: t.number)
    layers: list[str] = []
    for t in sorted(view.complete, key=lambda t: t.number):
        layers += [k for k in t.params if _is_layer_param(k) and k not in layers]
    rates = {k: sum(bool(t.params.get(k)) for t in near) / len(near) for k in layers} if near else {}
    return near, rates


def layer_map_figure(study, ranks: int = NEAR_FRONT_RANKS) -> go.Figure:
    """Per layer: kept in high precision (1) or not (0) in each feasible trial near the front (heatmap),
    and how often (bars). Sensitive layers are the ones kept in float nearly always."""
    view = StudyView.of(study)
    title = "Per-layer overrides near the front: how often each layer stays in high precision"
    if not view.feasible:
        return note_figure(f"No feasible trial in study {view.name!r}, so no per-layer override map.", title)
    near, rates = layer_override_rates(view, ranks)
    if not near:
        return note_figure("No feasible trial uses per-layer overrides (only routes without them, e.g. fp32/fp16, "
                           "are feasible, or the space has no layer_overrides): no per-layer map.", title)
    layers = list(rates)[::-1]
    short = [k.split(LAYER_PREFIX_SEP, 1)[1] for k in layers]
    z = [[1 if t.params.get(k) else 0 for t in near] for k in layers]
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, column_widths=[0.7, 0.3], horizontal_spacing=0.02,
                        subplot_titles=(f"{len(near)} feasible trials near the front", "share kept in float"))
    fig.add_trace(go.Heatmap(z=z, x=[f"#{t.number}" for t in near], y=short, zmin=0, zmax=1, showscale=False,
                             colorscale=[[0, "#f0f0f0"], [1, "#d62728"]], xgap=1, ygap=1,
                             hovertemplate="trial %{x}<br>%{y}<br>kept in float: %{z}<extra></extra>",
                             meta={"role": "layer_heatmap"}), row=1, col=1)
    fig.add_trace(go.Bar(x=[rates[k] for k in layers], y=short, orientation="h",
                         marker={"color": [rates[k] for k in layers], "colorscale": "Reds", "cmin": 0, "cmax": 1},
                         customdata=[[round(rates[k] * len(near)), len(near)] for k in layers],
                         hovertemplate="%{y}: kept in %{customdata[0]} of %{customdata[1]}<extra></extra>",
                         meta={"role": "layer_rates", "trials": [t.number for t in near]}), row=1, col=2)
    fig.update_xaxes(range=[0, 1], row=1, col=2)
    fig.update_xaxes(type="category", row=1, col=1)
    fig.update_layout(title=title, height=max(320, 20 * len(layers) + 180), showlegend=False)
    return fig


# ---------------------------------------------------------------- the summary table


def _fmt_s(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def summary_rows(study) -> list[tuple[str, str]]:
    """(label, value) rows: settings, trials by state, baseline, winner, speedup, error, tuning time."""
    view = StudyView.of(study)
    s, trials, done = view.settings, view.trials, view.complete
    by_state: dict[str, int] = {}
    for t in trials:
        by_state[t.state.name.lower()] = by_state.get(t.state.name.lower(), 0) + 1
    feasible = view.feasible
    rows = [("study", view.name),
            ("model", str(s.get("model_path", "?"))),
            ("requirement", view.requirement or "none"),
            ("objectives", str(s.get("objectives", ",".join(d.name.lower() for d in view.study.directions)))),
            ("sampler", str(s.get("sampler", type(view.study.sampler).__name__))),
            ("trials by state", ", ".join(f"{k} {v}" for k, v in sorted(by_state.items())) or "none"),
            ("feasible / infeasible", f"{len(feasible)} / {len(done) - len(feasible)}"
             + (" - no trial meets the requirement" if done and not feasible else ""))]
    base = view.baseline
    if base is not None:
        rows.append(("baseline", f"trial {base.number}: {view.latency(base):.3f} ms, "
                                 f"{view.primary_metric} {view.error(base):.3g}, precision {route_of(base)}"))
    else:
        rows.append(("baseline", "not measured yet"))
    winner = view.winner
    if winner:
        conf = winner.get("confirmed_latency") or {}
        metrics = winner.get("confirmed_metrics") or winner.get("metrics") or {}
        err = metrics.get(view.primary_metric)
        rows.append(("winner", f"trial {winner['trial']}: {conf.get('median_ms', float('nan')):.3f} ms confirmed "
                               f"(95% CI {conf.get('ci_low_ms', float('nan')):.3f}-{conf.get('ci_high_ms', float('nan')):.3f}), "
                               f"precision {(winner.get('config') or {}).get('precision')}"))
        base_conf = (winner.get("baseline_latency") or {}).get("median_ms")
        rows.append(("speedup", f"{winner['speedup']:.2f}x the baseline ({base_conf:.3f} ms, timed side by side)"
                     if winner.get("speedup") and base_conf else "n/a"))
        rows.append(("winner error", f"{view.primary_metric} {err:.3g}" + (
            f" (limit {view.bounds[0][1]:g})" if view.bounds else "") if err is not None else "n/a"))
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
        speed = f", {view.latency(base) / view.latency(best):.2f}x baseline in the search" if base is not None else ""
        rows.append(("fastest feasible in the search", f"trial {best.number}: {view.latency(best):.3f} ms{speed}, "
                                                       f"{view.primary_metric} {view.error(best):.3g}"))
    starts = [t.datetime_start for t in trials if t.datetime_start]
    ends = [t.datetime_complete for t in trials if t.datetime_complete]
    if starts and ends:
        busy = sum((t.datetime_complete - t.datetime_start).total_seconds()
                   for t in trials if t.datetime_start and t.datetime_complete)
        rows.append(("total tuning time", f"{_fmt_s((max(ends) - min(starts)).total_seconds())} from the first trial's "
                                          f"start to the last trial's end ({_fmt_s(busy)} inside trials)"))
    running = by_state.get("running", 0)
    if running:
        rows.append(("note", f"{running} trial(s) running: the study is still being tuned; this report is a snapshot"))
    return rows


def summary_table(study) -> go.Figure:
    """The summary rows as a plotly table (for notebooks; the HTML report writes an HTML table)."""
    rows = summary_rows(study)
    fig = go.Figure(go.Table(header={"values": ["", "value"], "align": "left"},
                             cells={"values": [[r[0] for r in rows], [r[1] for r in rows]], "align": "left"},
                             columnwidth=[1, 4]))
    fig.update_layout(title="Summary", height=60 + 32 * len(rows), margin={"t": 40, "b": 10})
    return fig


# ---------------------------------------------------------------- the HTML file


def figures(study) -> dict[str, go.Figure]:
    view = StudyView.of(study)
    return {"pareto": pareto_figure(view), "history": history_figure(view), "importance": importance_figure(view),
            "layers": layer_map_figure(view)}


_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
table.summary{border-collapse:collapse;margin:1em 0}table.summary td{border-bottom:1px solid #ddd;padding:4px 12px;vertical-align:top}
table.summary td:first-child{font-weight:600;white-space:nowrap}p.note{background:#fff4e5;border-left:4px solid #e67e22;padding:.8em 1em}
section{margin:2em 0}h2{margin-bottom:.3em}.meta{color:#666;font-size:90%}"""

_SECTIONS = (("pareto", "Pareto front"), ("history", "Optimization history"), ("importance", "Parameter importances"),
             ("layers", "Per-layer override map"))


def write_report(study, path: str, storage_url: str | None = None) -> str:
    """Write the self-contained HTML report of the study to path; return path."""
    view = StudyView.of(study)
    figs = figures(view)
    rows = summary_rows(view)
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>engine-tuner report: {html.escape(view.name)}</title>",
             f"<style>{_CSS}</style>",
             f"<script type='text/javascript'>{plotly.offline.get_plotlyjs()}</script></head><body>",
             f"<h1>Study {html.escape(view.name)}</h1>",
             f"<p class='meta'>{html.escape(storage_url or '')} - report written "
             f"{_dt.datetime.now().strftime('%Y-%m-%d %H:%M:%S')} by engine-tuner, Optuna {optuna.__version__}, "
             f"plotly {plotly.__version__}</p>",
             "<section><h2>Summary</h2><table class='summary'>"]
    parts += [f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in rows]
    parts.append("</table></section>")
    for key, heading in _SECTIONS:
        fig = figs[key]
        parts.append(f"<section id='{key}'><h2>{heading}</h2>")
        note = note_of(fig)
        if note:
            parts.append(f"<p class='note'>{html.escape(note)}</p>")
        if fig.data:
            parts.append(fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"fig-{key}",
                                     config={"displaylogo": False}))
        parts.append("</section>")
    parts.append("</body></html>")
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UserError(f"--out {path} is a directory; give a file name, e.g. {os.path.join(path, 'report.html')}")
    try:
        os.makedirs(parent, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(parts))
    except OSError as exc:
        raise UserError(f"--out {path}: cannot write it ({exc.strerror or exc})") from None
    return path


# ---------------------------------------------------------------- the command


def open_for_report(study: str, storage: str | None = None) -> optuna.Study:
    """Open a study to read it, without ever waiting on a process that is tuning it.

    A SQLite file is read with SQLite's plain deferred transactions: in WAL mode readers see the last
    committed state and neither wait for nor block a writer (the tuner's own connections take the
    write lock up front, which a reader has no need for). A file that does not exist is an error,
    not a new empty study file. Other storages go through open_storage."""
    from .api import load_study
    from .storage import default_url, local_path

    url = storage or default_url(study)
    path = local_path(url)
    if path is None or url.startswith("journal:"):
        if path is not None and not os.path.isfile(path):
            raise UserError(f"--storage {url}: no such file {path}")
        return load_study(study, url)
    if not os.path.isfile(path):
        raise UserError(f"--storage {url}: no such file {path}" + ("" if storage else "; give --storage URL"))
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        rdb = optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 60}})
    except Exception as exc:  # not a database, or a schema Optuna cannot read
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"--storage {url}: cannot read {path} as an Optuna study database ({first})") from None
    try:
        return optuna.load_study(study_name=study, storage=rdb)
    except KeyError:
        raise UserError(f"no study {study!r} in {url}; `tuner studies --storage {url}` lists the studies") from None


def sensitivity_figure(table: dict) -> go.Figure:
    """The ranking of `tuner sensitivity`: error with only this candidate quantized, and its share
    of fp32 time, most sensitive first."""
    entries = table["entries"]
    names = [e["name"] for e in entries]
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=(f"{table['metric']} error, only this candidate quantized", "share of fp32 node time"))
    fig.add_trace(go.Bar(y=names, x=[max(e["error_only"], 1e-12) for e in entries], orientation="h",
                         name="error", marker_color="#d62728"), row=1, col=1)
    fig.add_trace(go.Bar(y=names, x=[e["latency_share"] for e in entries], orientation="h", name="time share",
                         marker_color="#1f77b4"), row=1, col=2)
    fig.update_xaxes(type="log", row=1, col=1)
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(title=f"Sensitivity of {table['route'].get('precision')} "
                            f"(everything quantized: {table['error_all_quantized']:.3g})",
                      height=max(320, 18 * len(names) + 120), showlegend=False)
    return fig
