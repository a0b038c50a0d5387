"""`tuner trials`: one row per trial of a study, read-only, as a table on the terminal and, with --csv, every
column in a file (Optuna's trials_dataframe columns, then ours; no pandas needed)."""
from __future__ import annotations

import csv
import json
import math

from optuna.trial import FrozenTrial, TrialState

from ..search.record import StoredTrial
from ..search.trials import (
    fail_reason,
    is_feasible,
    latency_of,
    speed_key,
    speedup_of,
)
from .progress import shorten
from .view import StudyView, float_layers, route_of

REASON_CHARS = 60


def _measured(t: FrozenTrial) -> bool:
    return t.state == TrialState.COMPLETE and StoredTrial.of(t).measured


def _why_unmeasured(t: FrozenTrial) -> str:
    """Why a trial has no measurement, on one line ("" for one that has): its failure, or that it runs."""
    return fail_reason(t) or {TrialState.RUNNING: "running", TrialState.WAITING: "waiting"}.get(t.state, "")


def _backend(view: StudyView, t: FrozenTrial) -> str:
    """The library that built it, with its version where measured ("onnxruntime-1.32.0"), else the config's."""
    rec = StoredTrial.of(t)
    return str(rec.backend or rec.config.get("backend") or view.settings.backend or "?")


def trial_rows(study) -> tuple[StudyView, list[dict]]:
    """(the view, one dict per trial in number order) with our columns: what the table and the CSV share."""
    view = StudyView.of(study)
    base = view.baseline
    rows = []
    for t in view.trials:
        measured = _measured(t)
        up = speedup_of(t, base) if measured else None
        error = view.error(t) if measured else None
        rows.append({
            "number": t.number, "state": t.state.name,
            "speedup": up, "ms": latency_of(t) if measured else None, "error": error,
            "feasible": is_feasible(t) if measured else None,
            "route": route_of(t) if StoredTrial.of(t).config or "precision" in t.params else "",
            "backend": _backend(view, t), "float_layers": len(float_layers(t)),
            "fail_reason": _why_unmeasured(t), "_trial": t})
    return view, rows


def sort_rows(rows: list[dict], by: str) -> list[dict]:
    """number; speed: the figure the search ranks by (the paired ratio, else ms), fastest first; error: the
    primary metric, smallest first. Rows without that figure (failed, running, pruned) go last, by number."""
    def order(r):
        value = None if r["ms"] is None else speed_key(r["_trial"]) if by == "speed" else r["error"]
        missing = value is None or math.isnan(value)
        return (missing, 0.0 if missing else value, r["number"])

    return sorted(rows, key=(lambda r: r["number"]) if by == "number" else order)


def _fmt(value, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def table_lines(view: StudyView, rows: list[dict]) -> list[str]:
    metric = view.primary_metric
    head = (f"{'trial':>5s}  {'state':9s} {'speedup':>8s} {'ms':>9s} {metric:>10s} {'feasible':8s} "
            f"{'route':22s} {'backend':20s} {'float':>5s}  fail reason")
    lines = [head]
    for r in rows:
        rec = StoredTrial.of(r["_trial"])
        flags = "".join(f" [{w}]" for w, on in (("baseline", rec.baseline), ("reused", rec.copied)) if on)
        feasible = "-" if r["feasible"] is None else "yes" if r["feasible"] else "no"
        speed = f"{r['speedup']:.2f}x" if r["speedup"] else "-"
        lines.append(f"{r['number']:5d}  {r['state'].lower():9s} {speed:>8s} {_fmt(r['ms'], '.3f'):>9s} "
                     f"{_fmt(r['error'], '.4g'):>10s} {feasible:8s} {r['route'][:22]:22s} {r['backend'][:20]:20s} "
                     f"{r['float_layers']:5d}  {shorten(r['fail_reason'], REASON_CHARS)}{flags}".rstrip())
    done = sum(1 for r in rows if r["ms"] is not None)
    lines.append(f"{len(rows)} trials, {done} measured; speedup: over the baseline "
                 f"({'paired timing: 1 / the ratio timed beside it' if view.paired else 'its ms / the trial ms'}); "
                 f"{metric}: the requirement's primary error metric ({view.requirement or 'no requirement'})")
    return lines


def _cell(value) -> str | int | float:
    if value is None:
        return ""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, default=str)
    if isinstance(value, bool):
        return str(value)
    return value


def csv_columns(view: StudyView, rows: list[dict]) -> tuple[list[str], list[list]]:
    """Optuna's trials_dataframe columns (number, values, datetimes, duration, params_*, state, constraints),
    then ours (speedup, ms, error, feasible, route, ...), then every metric and the latency statistics."""
    trials = [r["_trial"] for r in rows]
    names = view.study.metric_names or [str(i) for i in range(len(view.study.directions))]
    values = [f"values_{n}" for n in names] if len(names) > 1 else ["value"]
    params = sorted({p for t in trials for p in t.params})
    recs = {t.number: StoredTrial.of(t) for t in trials}
    metrics = sorted({m for r in recs.values() for m in r.metrics})
    lat_keys = sorted({k for r in recs.values() for k, v in (r.latency or {}).items() if not isinstance(v, (list, dict))})
    header = (["number", *values, "datetime_start", "datetime_complete", "duration", *[f"params_{p}" for p in params],
               "state", "constraints", "speedup", "ms", "error_metric", "error", "feasible", "route", "backend",
               "float_layers", "fail_reason", "baseline", "reused_from", "relative", "disturbed", "stopped_early",
               "busy", "build_s", "engine_bytes", *[f"metric_{m}" for m in metrics],
               *[f"latency_{k}" for k in lat_keys], "config"])
    out = []
    for r in rows:
        t: FrozenTrial = r["_trial"]
        vals = list(t.values) if t.values else [None] * len(values)
        duration = (t.datetime_complete - t.datetime_start).total_seconds() if t.datetime_complete and t.datetime_start else None
        a = recs[t.number]
        row = [t.number, *vals[: len(values)], t.datetime_start, t.datetime_complete, duration,
               *[t.params.get(p) for p in params], t.state.name, getattr(t, "constraints", None),
               r["speedup"], r["ms"], view.primary_metric, r["error"], r["feasible"], r["route"], r["backend"],
               r["float_layers"], r["fail_reason"], a.baseline, a.reused_from, a.ratio,
               a.disturbed, bool(a.stopped), a.busy, a.build_s, a.engine_bytes,
               *[a.metrics.get(m) for m in metrics], *[(a.latency or {}).get(k) for k in lat_keys],
               a.config if a.has_config else None]
        out.append([_cell(v) for v in row])
    return header, out


def write_csv(view: StudyView, rows: list[dict], path: str) -> None:
    header, body = csv_columns(view, rows)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(body)
