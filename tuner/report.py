"""`tuner report`: the subcommand, and the report's figures for notebooks.

The figures live in tuner/figures.py (Optuna, plotly); this module stays light so that building the
CLI parser imports neither. `from tuner.report import pareto_figure` etc. loads them on first use.
"""
from __future__ import annotations

import argparse

_FIGURES = ("StudyView", "figures", "history_figure", "importance_evaluator", "importance_figure", "importances",
            "layer_map_figure", "layer_override_rates", "note_figure", "note_of", "open_for_report", "pareto_figure",
            "pareto_front", "summary_rows", "summary_table", "write_report")
__all__ = [*_FIGURES, "cmd_report", "register"]


def __getattr__(name: str):
    if name in _FIGURES:
        from . import figures

        return getattr(figures, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def cmd_report(args) -> int:
    from .figures import StudyView, open_for_report, write_report
    from .storage import default_url

    url = args.storage or default_url(args.study)
    study = open_for_report(args.study, args.storage)
    view = StudyView.of(study)
    write_report(view, args.out, url)
    print(f"report of study {args.study} ({len(view.trials)} trials, {len(view.feasible)} feasible) written to {args.out}")
    return 0


def register(subparsers) -> argparse.ArgumentParser:
    """Add `tuner report` (and its handler, as func) to the CLI's subparsers; return its parser."""
    p = subparsers.add_parser(
        "report", help="write a self-contained HTML report of a study (works offline)",
        description="Write one HTML file (plotly.js inlined, no network needed) with the Pareto front, the "
                    "optimization history, parameter importances, the per-layer override map and a summary table. "
                    "Reads without locking, so it can run while the study is being tuned.")
    p.add_argument("--study", required=True, help="study name")
    p.add_argument("--storage", help="storage URL (default sqlite:///studies/NAME.db; journal:///FILE.log; postgresql+psycopg://...)")
    p.add_argument("--out", default="report.html", help="output HTML file (default report.html)")
    p.set_defaults(func=cmd_report)
    return p
