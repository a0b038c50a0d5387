"""The report as one self-contained HTML file (plotly.js inlined, works offline)."""
from __future__ import annotations

import datetime as _dt
import html
import os

import optuna
import plotly

from ..errors import UserError
from .charts import figures, note_of
from .sensitivity_table import sensitivity_columns
from .view import StudyView, sensitivity_rows, summary_rows

_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
table.summary{border-collapse:collapse;margin:1em 0}\
table.summary td{border-bottom:1px solid #ddd;padding:4px 12px;vertical-align:top}
table.summary td:first-child{font-weight:600;white-space:nowrap}\
p.note{background:#fff4e5;border-left:4px solid #e67e22;padding:.8em 1em}
section{margin:2em 0}h2{margin-bottom:.3em}.meta{color:#666;font-size:90%}"""


_SECTIONS = (("workload", "Speedup at each set of shapes"), ("pareto", "Pareto front"),
             ("history", "Optimization history"), ("importance", "Parameter importances"),
             ("layers", "Per-layer override map"))


SENSITIVITY_ROWS = 40


def _sensitivity_sections(view) -> list[str]:
    """The study's per-layer sensitivity tables: the layers the greedy pass keeps in float first (above the
    line), then the rest by sensitivity."""
    parts = []
    for route, entries, cut, method in sensitivity_rows(view):
        only, all_but = sensitivity_columns(method)
        what = (f"error ({html.escape(view.primary_metric)}) with only this candidate quantized, and with all but it"
                if method == "builds" else "the relative error its own quantization adds to its output, and its "
                "output's relative error with every layer quantized (one float and one all-quantized run)")
        parts.append(f"<section id='sensitivity'><h2>Per-layer sensitivity: {html.escape(route)}</h2>"
                     f"<p class='meta'>{cut} kept in float, confirmed by builds (first rows); {what}; its share of the "
                     "fp32 engine's node time</p><table class='summary'>"
                     f"<tr><td>candidate</td><td>{only}</td><td>{all_but}</td><td>fp32 share</td></tr>")
        for i, e in enumerate(entries[:SENSITIVITY_ROWS]):
            mark = " style='border-bottom:2px solid #d62728'" if i == cut - 1 else ""
            parts.append(f"<tr{mark}><td>{html.escape(e['name'])}</td><td>{e['error_only']:.4g}</td>"
                         f"<td>{e['error_all_but']:.4g}</td><td>{100 * e['latency_share']:.1f}%</td></tr>")
        if len(entries) > SENSITIVITY_ROWS:
            parts.append(f"<tr><td>... {len(entries) - SENSITIVITY_ROWS} more</td><td></td><td></td><td></td></tr>")
        parts.append("</table></section>")
    return parts


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
        if key not in figs:  # the per-set figure of a study of one set
            continue
        fig = figs[key]
        parts.append(f"<section id='{key}'><h2>{heading}</h2>")
        note = note_of(fig)
        if note:
            parts.append(f"<p class='note'>{html.escape(note)}</p>")
        if fig.data:
            parts.append(fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"fig-{key}",
                                     config={"displaylogo": False}))
        parts.append("</section>")
    parts += _sensitivity_sections(view)
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
