"""The report's charts (plotly): the Pareto front, the history, importances, the per-layer map, the
summary table and the sensitivity ranking. Where a chart cannot say anything (no feasible trial, too
few trials), the figure carries a plain note instead: `note_of(fig)` gives it."""
from __future__ import annotations

import datetime as _dt
import html
import math

import plotly.graph_objects as go
from optuna.trial import FrozenTrial, TrialState
from plotly.subplots import make_subplots

from ..search.record import StoredTrial
from ..search.trials import is_feasible, runtime_defaults_trials
from .as_run import runtime_name
from .view import (
    NEAR_FRONT_RANKS,
    StudyView,
    _elapsed_s,
    _kept_in_float,
    _main_params,
    float_layers,
    importance_evaluator,
    importances,
    layer_override_rates,
    pareto_front,
    route_of,
    summary_rows,
)

MAX_IMPORTANCE_PARAMS = 15


ROUTE_COLORS = {"fp32": "#1f77b4", "fp16": "#2ca02c", "int8-dynamic": "#ff7f0e", "int8-static": "#d62728",
                "int4-weight": "#9467bd"}


OTHER_COLORS = ["#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


def _route_color(route: str, routes: list[str]) -> str:
    if route in ROUTE_COLORS:
        return ROUTE_COLORS[route]
    others = [r for r in routes if r not in ROUTE_COLORS]
    return OTHER_COLORS[others.index(route) % len(OTHER_COLORS)] if route in others else OTHER_COLORS[0]


def _hover(view: StudyView, t: FrozenTrial) -> str:
    parts = [f"<b>trial {t.number}</b>", f"latency {view.latency_text(t)}",
             f"{view.primary_metric} {view.error(t):.3g}", "feasible" if is_feasible(t) else "INFEASIBLE"]
    rec = StoredTrial.of(t)
    if rec.baseline:
        parts.append("baseline (backend defaults)")
    if rec.copied:
        parts.append(f"same build as trial {rec.reused_from}")
    parts += [f"{k}={v}" for k, v in _main_params(t).items()]
    kept = _kept_in_float(t)
    if kept:
        parts.append(f"{kept} nodes kept in float")
    return "<br>".join(parts)


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
        ends = ([min(lats) / 1.2, max(lats) * 1.2] if latency_scale(lats) == "log"  # a log axis has no x <= 0
                else [min(lats) - pad, max(lats) + pad])
        y_limit = max(limit, floor) if floor is not None else limit  # a limit of 0 sits on the zero line
        fig.add_trace(go.Scatter(
            x=ends, y=[y_limit, y_limit], mode="lines",
            line={"color": "crimson", "dash": "dash"}, name=f"requirement {metric}<={limit:g}",
            hoverinfo="name", meta={"role": "requirement", "metric": metric, "limit": limit}))
    # The winner is drawn first and smaller, the baseline hollow and larger on top of it: where they
    # are one trial (nothing beat the defaults), both stay visible.
    winner = view.winner
    wt = view.trial(winner.trial) if winner else None
    if wt is not None and wt.state == TrialState.COMPLETE:
        conf = winner.confirmed_latency.get("median_ms")
        speed = f", {winner.speedup:.2f}x baseline" if winner.speedup else ""
        fig.add_trace(go.Scatter(
            x=[view.latency(wt)], y=[y_of(wt)], mode="markers", name=f"winner (trial {wt.number})",
            marker={"symbol": "star", "size": 15, "color": "gold", "line": {"width": 1.5, "color": "black"}},
            customdata=[[wt.number]], hoverinfo="text",
            hovertext=[_hover(view, wt) + (f"<br>confirmed {conf:.3f} ms{speed}" if conf else "")],
            meta={"role": "winner", "confirmed_ms": conf}))
    _add_confirmed(fig, view, y_of)
    base = view.baseline
    if base is not None:
        fig.add_trace(go.Scatter(
            x=[view.latency(base)], y=[y_of(base)], mode="markers", name=f"baseline (trial {base.number})",
            marker={"symbol": "square-open", "size": 26, "color": "black", "line": {"width": 2}},
            customdata=[[base.number]], hovertext=[_hover(view, base)], hoverinfo="text", meta={"role": "baseline"}))
    note = None
    if not feasible:
        note = (f"No feasible trial: none of the {len(done)} completed trials meets "
                f"{view.requirement or 'the requirement'}, so there is no Pareto front and no winner.")
        fig.add_annotation(text=note, showarrow=False, xref="paper", yref="paper", x=0.5, y=1.0, yanchor="bottom",
                           font={"size": 13, "color": "crimson"})
    fig.update_xaxes(type=latency_scale(lats))
    fig.update_layout(title=title, xaxis_title=view.latency_label,
                      yaxis_title=f"{view.primary_metric} error" + (" (log scale)" if yscale == "log" else ""),
                      yaxis_type=yscale, height=560, hovermode="closest", legend={"itemsizing": "constant"},
                      meta={"note": note, "yscale": yscale, "floor": floor} if note else {"yscale": yscale, "floor": floor})
    fig.update_yaxes(exponentformat="power")  # 10^-5, not SI prefixes ("10f", "100p") for errors
    lows = [e for e in errors + [v for m, v in view.bounds[:1]] if math.isfinite(e) and floor is not None and e < floor]
    if lows:
        fig.update_yaxes(**_zero_line_ticks(floor, max([e for e in errors if math.isfinite(e)] + [floor])))
        fig.add_annotation(text="exact zeros are drawn on the line labelled 0 (a log axis has no 0)", showarrow=False,
                           xref="paper", yref="paper", x=1, y=0, xanchor="right", yanchor="bottom", font={"size": 10})
    return fig


CONTRADICTED = 1.10  # a confirmed figure this far from the search's, outside its interval, contradicts it


def confirmed_points(view: StudyView) -> list[tuple[FrozenTrial, float, bool]]:
    """(trial, its latency as confirmed side by side in selection on the chart's axis, whether that contradicts
    the search's figure) per finalist: a search figure timed under load can read far faster or slower than
    the same engine timed beside the others."""
    out = []
    for f in view.winner.finalists if view.winner else []:
        t = view.trial(f.trial)
        if t is None or t.state != TrialState.COMPLETE:
            continue
        rel = f.relative
        if view.paired and rel:
            value, low, high = rel["ratio"], rel["ci_low"], rel["ci_high"]
        elif not view.paired:
            value, low, high = f.median_ms, f.ci_low_ms, f.ci_high_ms
        else:
            continue
        search = view.latency(t)
        apart = max(value, search) / max(min(value, search), 1e-12)
        out.append((t, value, apart > CONTRADICTED and not low <= search <= high))
    return out


def _add_confirmed(fig: go.Figure, view: StudyView, y_of) -> None:
    """The finalists as selection confirmed them (diamonds), each joined to its search point; a search point
    that selection contradicted is crossed out in grey, so the chart does not show it as a result."""
    points = confirmed_points(view)
    if not points:
        return
    fig.add_trace(go.Scatter(
        x=[v for _, v, _ in points], y=[y_of(t) for t, _, _ in points], mode="markers",
        name=f"confirmed side by side ({len(points)} finalists)", customdata=[[t.number] for t, _, _ in points],
        hovertext=[_hover(view, t) + f"<br>confirmed in selection: {view.axis_text(v)}" for t, v, _ in points],
        hoverinfo="text", marker={"symbol": "diamond", "size": 12, "color": "white", "line": {"width": 2, "color": "black"}},
        meta={"role": "confirmed"}))
    contradicted = [(t, v) for t, v, bad in points if bad]
    for t, v in contradicted:
        fig.add_trace(go.Scatter(x=[view.latency(t), v], y=[y_of(t), y_of(t)], mode="lines", showlegend=False,
                                 line={"color": "grey", "dash": "dot", "width": 1}, hoverinfo="skip",
                                 meta={"role": "moved", "trial": t.number}))
    if contradicted:
        fig.add_trace(go.Scatter(
            x=[view.latency(t) for t, _ in contradicted], y=[y_of(t) for t, _ in contradicted], mode="markers",
            name=f"search figure contradicted by selection ({len(contradicted)})",
            customdata=[[t.number] for t, _ in contradicted], hoverinfo="text",
            hovertext=[_hover(view, t) + f"<br>selection timed it at {view.axis_text(v)}: this search figure is "
                                          "not a result (timed under load?)" for t, v in contradicted],
            marker={"symbol": "x", "size": 14, "color": "grey"}, meta={"role": "contradicted"}))


LOG_SPAN = 20.0  # latencies this many times apart are drawn on a log axis, or one slow engine flattens the rest


def latency_scale(latencies: list[float]) -> str:
    """'log' where the latencies span LOG_SPAN or more (one engine 800x the baseline left every other point
    at the left edge of the demo's chart), else 'linear'."""
    finite = [v for v in latencies if math.isfinite(v) and v > 0]
    return "log" if finite and max(finite) / min(finite) >= LOG_SPAN else "linear"


def _zero_line_ticks(floor: float, top: float) -> dict:
    """Log-axis ticks: the floor (where exact zeros are drawn) labelled 0, then each power of ten above it."""
    vals, texts = [floor], ["0"]
    k = math.floor(math.log10(floor)) + 1
    while 10.0 ** k <= top * 10:
        if 10.0 ** k > floor * 3:  # not crowding the 0 label
            vals.append(10.0 ** k)
            texts.append(f"10<sup>{k}</sup>" if k not in (0, 1) else f"{10 ** k}")
        k += 1
    return {"tickmode": "array", "tickvals": vals, "ticktext": texts}


def history_figure(study) -> go.Figure:
    """Best feasible latency so far, against trial number (left) and wall time since the first trial (right: the
    anytime figure, the analysis a gap after each runtime's defaults), with each runtime's defaults as lines."""
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
                      annotation_text=f"baseline {view.latency_text(base)}", annotation_position="top right")
    for t in runtime_defaults_trials(done):  # what a user gets from each other runtime as it comes
        name = runtime_name(str(StoredTrial.of(t).config.get("backend", "")))
        fig.add_hline(y=view.latency(t), line_dash="dot", line_color="#2ca02c",
                      annotation_text=f"{name}'s defaults {view.latency_text(t)}", annotation_position="bottom right")
    fig.update_xaxes(title_text="trial number", row=1, col=1)
    fig.update_xaxes(title_text="minutes since the first trial started", row=1, col=2)
    fig.update_yaxes(title_text=view.latency_label, row=1, col=1, type=latency_scale([view.latency(t) for t in done]))
    fig.update_layout(title=title, height=450, hovermode="closest")
    return fig


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
    if not rates:
        return note_figure(f"No layer is kept in float by the {len(near)} feasible trials near the front: every "
                           "quantizable layer stays quantized.", title)
    layers = short = list(rates)[::-1]
    kept = {t.number: set(float_layers(t)) for t in near}
    z = [[1 if k in kept[t.number] else 0 for t in near] for k in layers]
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


def summary_table(study) -> go.Figure:
    """The summary rows as a plotly table (for notebooks; the HTML report writes an HTML table)."""
    rows = summary_rows(study)
    fig = go.Figure(go.Table(header={"values": ["", "value"], "align": "left"},
                             cells={"values": [[r[0] for r in rows], [r[1] for r in rows]], "align": "left"},
                             columnwidth=[1, 4]))
    fig.update_layout(title="Summary", height=60 + 32 * len(rows), margin={"t": 40, "b": 10})
    return fig


def sensitivity_figure(table: dict) -> go.Figure:
    """The ranking of `tuner sensitivity`: error with only this candidate quantized, and its share
    of fp32 time, most sensitive first."""
    entries = table["entries"]
    names = [e["name"] for e in entries]
    title = (f"{table['metric']} error, only this candidate quantized" if table.get("method", "builds") == "builds"
             else "relative error its quantization adds to its output")
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=(title, "share of fp32 node time"))
    fig.add_trace(go.Bar(y=names, x=[max(e["error_only"], 1e-12) for e in entries], orientation="h",
                         name="error", marker_color="#d62728"), row=1, col=1)
    fig.add_trace(go.Bar(y=names, x=[e["latency_share"] for e in entries], orientation="h", name="time share",
                         marker_color="#1f77b4"), row=1, col=2)
    fig.update_xaxes(type="log", row=1, col=1)
    fig.update_yaxes(autorange="reversed")
    everything = table.get("error_all_quantized")
    fig.update_layout(title=f"Sensitivity of {table['route'].get('precision')}"
                            + (f" (everything quantized: {everything:.3g})" if everything is not None else ""),
                      height=max(320, 18 * len(names) + 120), showlegend=False)
    return fig


def workload_figure(study) -> go.Figure:
    """The winner's speedup over the baseline at each set of the workload's shapes and weighted over them, each
    with its 95% interval, as selection timed them side by side."""
    view = StudyView.of(study)
    title = "The winner at each set of the workload's shapes"
    sets = view.winner.confirmed_workload if view.winner else None
    if not sets:
        return note_figure("The study tunes one set of shapes, or has no winner: no per-set figures.", title)
    rel = view.winner.confirmed_relative
    labels = [f"{f['shapes']} ({100 * f['weight']:.0f}%)" for f in sets] + ["weighted"]
    ratios = [(f["ratio"], f["ci_low"], f["ci_high"]) for f in sets] + [(rel["ratio"], rel["ci_low"], rel["ci_high"])]
    speedups = [1 / r for r, _, _ in ratios]
    fig = go.Figure(go.Bar(x=labels, y=speedups, marker_color=["#1f77b4"] * len(sets) + ["#2ca02c"],
                           error_y={"type": "data", "symmetric": False,
                                    "array": [1 / lo - 1 / r for r, lo, _ in ratios],
                                    "arrayminus": [1 / r - 1 / hi for r, _, hi in ratios]},
                           hovertemplate="%{x}: %{y:.2f}x the baseline<extra></extra>", meta={"role": "workload"}))
    fig.add_hline(y=1.0, line={"color": "black", "dash": "dot", "width": 1})
    fig.update_layout(title=title, yaxis_title="speedup over the baseline", height=360, showlegend=False)
    return fig


def figures(study) -> dict[str, go.Figure]:
    view = StudyView.of(study)
    out = {"pareto": pareto_figure(view), "history": history_figure(view), "importance": importance_figure(view),
           "layers": layer_map_figure(view)}
    if view.winner and view.winner.confirmed_workload:  # a workload of several sets: each set's figure
        out["workload"] = workload_figure(view)
    return out
