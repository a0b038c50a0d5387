"""Reports of a study: view data (view), charts (charts), the HTML page (html), `tuner status` (status).

Light on purpose: `from tuner.report import pareto_figure` loads plotly and Optuna on first use, so
building the CLI parser imports neither.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "StudyView": "view", "importance_evaluator": "view", "importances": "view", "layer_override_rates": "view",
    "pareto_front": "view", "summary_rows": "view", "float_layers": "view", "sensitivity_rows": "view",
    "confirmed_points": "charts",
    "figures": "charts", "history_figure": "charts", "importance_figure": "charts", "layer_map_figure": "charts",
    "note_figure": "charts", "note_of": "charts", "pareto_figure": "charts", "sensitivity_figure": "charts",
    "summary_table": "charts", "workload_figure": "charts",
    "write_report": "html",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
