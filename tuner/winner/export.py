"""`tuner export`: the study's winner (or, asked for, its best-effort candidate): its engine as it was
timed, downloaded from the study's artifact store and checked against the sha256 recorded at upload
(tuner.store.artifacts), or, with --rebuild or where the study keeps no artifact of it, rebuilt from its config
through the isolated evaluator; its accuracy checked again; the engine, config.json and report.json
written into a new folder (tuner.winner.export_files: staged, then moved into place)."""
from __future__ import annotations

import json
import os

import optuna

from .. import __version__
from ..backends.base import get_backend
from ..errors import UserError
from ..execute.jobs import Evaluator
from ..execute.results import SavedEngine
from ..inputs.model import shape_text
from ..problem.spec import Problem
from ..report.as_run import deployed_text, precision_text, vs_defaults_text
from ..search.reading import CheckedStudy
from ..search.record import StoredStudy, Winner
from ..store.artifacts import check_files, engine_of, fetch_engine, note, resolve_store
from .export_files import check_out_dir, install, staging_dir


def export_winner(study: optuna.Study, problem: Problem, out_dir: str, best_effort: bool = False,
                  timeout_s: float = 1800.0, force: bool = False, rebuild: bool = False,
                  artifacts: str | None = None) -> dict:
    """Write the winner (or, with best_effort, the closest candidate) into out_dir with config.json and
    report.json: the engine that was timed, from the artifact store (`artifacts`: --artifacts, else the
    study's), or with `rebuild` (or no artifact of it: said in one line) rebuilt from its config.
    out_dir must be new or empty; with force, only what an earlier export wrote is replaced."""
    stored = StoredStudy.of(study)
    chosen = stored.winner.stored if stored.winner else None
    kind = "winner"
    if not chosen:
        if not best_effort:
            hint = " (it has a best-effort candidate: add --best-effort)" if stored.best_effort else ""
            raise UserError(f"study {study.study_name!r} has no confirmed winner{hint}; "
                            f"run `tuner select --study {study.study_name}` first")
        chosen = stored.best_effort
        kind = "best-effort (does not meet the requirement)"
        if not chosen:
            raise UserError(f"study {study.study_name!r} has no completed trial to export")
    fault = study.fault_of(chosen.get("trial")) if isinstance(study, CheckedStudy) else None
    if fault:
        raise UserError(f"study {study.study_name!r}: the {kind.split()[0]}, trial {chosen.get('trial')}, cannot be "
                        f"exported: {fault}")
    check_out_dir(out_dir, force)
    store = resolve_store(study, artifacts)
    record = None if rebuild or store is None else engine_of(study, chosen)
    if record is None and not rebuild:
        was = (chosen.get("engine_artifact") or {}).get("store")  # where selection uploaded it (a migrated study)
        why = ("its study has no artifact store (a database server: tune/select --artifacts DIR_OR_URL keeps the "
               "timed engines" + (f"; it was uploaded to {was}: --artifacts {was} exports it" if was else "") + ")"
               if store is None else f"{store.url} holds no engine of it (selected before engines were uploaded, "
               "or the upload failed)")
        note(f"trial {chosen['trial']}: rebuilt from its config, since {why}; the bytes may differ from those timed")
    with staging_dir(out_dir) as staging:
        engine_dir = os.path.join(staging, "engine")
        if record is not None:
            fetch_engine(store, record, engine_dir)  # sha256 of the tar and of every file, as uploaded
        with Evaluator(problem.loaded, timeout_s, study=study.study_name) as evaluator:
            if record is not None:
                built = evaluator.load(chosen["config"], engine_dir, record.get("main"))
            else:
                built = evaluator.export(chosen["config"], engine_dir)
        if record is not None:
            check_files(engine_dir, record)  # the accuracy check left the bytes as they were timed
        report = _export_report(study, problem, chosen, kind, built, staging, out_dir)
        report["engine_source"] = _source(record, store)
        with open(os.path.join(staging, "config.json"), "w") as f:
            json.dump(chosen["config"], f, indent=2, sort_keys=True)
        with open(os.path.join(staging, "report.json"), "w") as f:
            json.dump(report, f, indent=2, default=str)
        install(out_dir, staging, {"written_by": f"tuner export (engine-tuner {__version__})",
                                   "study": study.study_name, "trial": chosen["trial"]})
    return report


def _export_report(study: optuna.Study, problem: Problem, chosen: dict, kind: str, built: SavedEngine, staging: str,
                   out_dir: str) -> dict:
    """report.json: what was exported, how to run it, and whether the engine meets the requirement
    ("rebuilt_matches_stored": its error is the stored one, for a downloaded engine as for a rebuilt one)."""
    metrics, per_output = built.metrics, built.per_output
    stored = chosen.get("confirmed_metrics") or chosen.get("metrics") or {}
    primary = problem.requirement.primary_metric
    precision = built.precision or chosen.get("precision")
    report = {
        "kind": kind,
        "study": study.study_name,
        "trial": chosen["trial"],
        "config": chosen["config"],
        "backend": built.backend,
        "engine": os.path.relpath(built.engine, staging),
        # the lines of Python that load and run it with the backend's own library, at its final place
        "usage": built.usage.replace(os.path.join(staging, "engine"), os.path.join(out_dir, "engine")),
        "requirement": str(problem.requirement),
        "meets_requirement": problem.requirement.holds(metrics),
        "metrics": metrics,
        "per_output": per_output,
        "stored_metrics": stored,
        "rebuilt_matches_stored": _close(metrics.get(primary), stored.get(primary)),
        "latency": chosen.get("confirmed_latency") or chosen.get("latency"),
        "baseline_latency": chosen.get("baseline_latency"),
        "speedup_vs_baseline": chosen.get("speedup"),
        # what the exported engine computes in, as its runtime says (OpenVINO: bf16 where the CPU has BF16)
        "precision_as_run": precision,
        "precision_text": precision_text(chosen["config"], precision),
        # the winner over each installed runtime's defaults, timed side by side in the same selection
        "vs_defaults": chosen.get("vs_defaults"),
        "vs_defaults_text": vs_defaults_text(Winner.from_attrs(chosen)) or None,
        "runtime_defaults": chosen.get("defaults"),
        # the deployment check: the winner and the baseline each alone in several fresh processes
        "deployed": chosen.get("deployed"),
        "deployed_text": deployed_text(chosen.get("deployed"), chosen.get("speedup")) or None,
        # the input shapes it was tuned and checked at, and whether it serves only those (issue 42)
        "shapes": {name: list(shape) for name, shape in problem.shapes.items()},
        "serves_only_these_shapes": fixed_shapes(problem, chosen["config"]),
        # a workload of several sets of shapes: each set and its share, and the winner's side-by-side figures there
        "workload": [{"shapes": c.label, "weight": c.weight} for c in problem.cases] if problem.several_shapes else None,
        "workload_figures": chosen.get("confirmed_workload"),
        "engine_tuner": __version__,
    }
    return report


def fixed_shapes(problem: Problem, config: dict) -> str | None:
    """Why the engine runs only at the study's input shapes (its backend's option), or None."""
    return get_backend(problem.backend_name(config)).fixes_shapes(config)


def shapes_line(report: dict) -> str | None:
    """The one line export says when its engine serves only the shapes it was tuned at."""
    why = report.get("serves_only_these_shapes")
    if not why:
        return None
    shapes = (" and ".join(w["shapes"] for w in report["workload"]) if report.get("workload")
              else " ".join(f"{n}={shape_text(s)}" for n, s in (report.get("shapes") or {}).items()))
    return (f"the engine serves only the input shapes it was tuned and checked at ({shapes}): {why}; "
            "tune at the shapes it will serve")


def _source(record: dict | None, store) -> dict:
    """report.json's engine_source: the artifact exported (the engine as timed, with its sha256) or "rebuilt"."""
    if record is None:
        return {"kind": "rebuilt"}
    return {"kind": "artifact", "artifact": record["id"], "timed_in": record.get("source"), "store": store.url,
            "sha256": record["sha256"], "files": record["files"], "uploaded_at": record.get("uploaded_at"),
            "host": record.get("host")}


def _close(a, b, rel: float = 0.05) -> bool:
    """The rebuild reproduces the stored error (same build, same data: equal up to kernel noise)."""
    if a is None or b is None:
        return False
    return abs(a - b) <= rel * max(abs(a), abs(b)) + 1e-9
