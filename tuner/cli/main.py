"""The `tuner` command line: the parser of every command; their work is in commands.py, loaded on first use."""
from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from importlib.metadata import entry_points

from .. import __version__
from ..backends.tensorrt.cli import add_routes_parser
from ..errors import Terminated, UserError, install_stops, restore_stops
from ..search.choices import KEEP_ARTIFACTS, SAMPLERS, SENSITIVITY_METHODS, TRIAL_SORTS, WHEN_BUSY, Objectives, Timing, values


def parse_duration(text: str) -> float:
    """'90', '90s', '30m', '2h', '1h30m' -> seconds; a negative or zero duration is refused."""
    m = re.fullmatch(r"\s*(-)?\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?\s*", text or "")
    if not text or not m or not any(m.groups()[1:]):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration; write e.g. 90s, 30m, 2h or 1h30m")
    h, mi, se = (float(g) if g else 0.0 for g in m.groups()[1:])
    seconds = h * 3600 + mi * 60 + se
    if m.group(1) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration must be more than zero; write e.g. 90s, 30m, 2h or 1h30m")
    return seconds


DURATION_OPTIONS = ("--timeout", "--trial-timeout")
SPACE_HELP = ("a built-in space's name (cpu, onnxruntime-cpu, openvino-cpu, onnxruntime-cpu-small, ...: search_spaces/) or a "
              "YAML file; default: cpu where OpenVINO is installed (ONNX Runtime and OpenVINO in one study), else "
              "onnxruntime-cpu")


def _normalize_argv(argv: list[str]) -> list[str]:
    """argparse reads `--timeout -5m` as two options ("expected one argument"): join them, so the
    duration check says what is wrong. trtexec's `--shapes` is read as --shape, whose check hints the syntax."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] in DURATION_OPTIONS and re.match(r"-\d", arg):
            out[-1] = f"{out[-1]}={arg}"
        elif arg == "--shapes" or arg.startswith("--shapes="):
            out.append("--shape" + arg[len("--shapes"):])
        else:
            out.append(arg)
    return out


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: needs a whole number of at least 1")
    return int(text)


def _non_negative_int(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: needs a whole number of 0 or more")
    return int(text)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: needs a number of seconds above 0, e.g. 10")
    return value


class _Parser(argparse.ArgumentParser):
    """Bad arguments get one line (what is wrong, where the options are listed), not the usage block."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists the options)\n")


def _add_problem_args(p: argparse.ArgumentParser, model_optional: bool = False) -> None:
    if model_optional:
        p.add_argument("model", nargs="?",
                       help="path of the .onnx model (needed to create a study; default on resume: the stored one)")
    else:
        p.add_argument("model", help="path of the .onnx model")
    p.add_argument("--space", help=SPACE_HELP)
    p.add_argument("--data", help=".npz with one array per input, leading axis = batches (default: synthetic inputs, "
                                  "floats standard normal, integers from --int-range)")
    p.add_argument("--calib-data", help=".npz of calibration batches (default: the first validation batches)")
    p.add_argument("--ref-outputs", metavar="FILE.npz",
                   help="the reference outputs of --data's batches from the training framework (trtexec "
                        "--loadRefOutputs, Polygraphy's saved outputs): one array per model output, leading axis = "
                        "batches; errors are measured against them (default: ONNX Runtime's fp32 outputs; needs --data)")
    p.add_argument("--shape", action="append", metavar="NAME=DIMS[,NAME=DIMS][@WEIGHT]",
                   help="shape of a dynamic input, e.g. input_ids=8x128 (repeatable; default: the model's static "
                        "shapes). A workload of several shapes: one --shape per set, naming every dynamic input, "
                        "with its share of the requests, e.g. --shape x=1x16@0.7 --shape x=32x128@0.3; each set is "
                        "timed and checked, and the objective is the weighted mean of the sets' speedups "
                        "(docs/workloads.md)")
    p.add_argument("--int-range", action="append", metavar="NAME=LOW:HIGH",
                   help="value range of an integer input for synthetic data, e.g. input_ids=0:30522 (default: none; "
                        "integer inputs need one without --data)")
    p.add_argument("--require", action="append", help="accuracy requirement, e.g. 'cos<=0.005' (repeatable, or "
                                                      "comma-separated; default: none, every trial counts as feasible)")


def _add_allow_metric(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-metric", action="append", metavar="MODULE:FUNC",
                   help="run this user metric where the study's requirement names it (repeatable; default: none; "
                        "a stored metric is code whoever writes the database chose: docs/distributed.md#trust-model)")


def _add_artifacts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--artifacts", metavar="DIR_OR_URL",
                   help="the study's artifact store, where the engines timed in selection go (a folder all hosts see, "
                        "s3://BUCKET[/PREFIX] or gs://BUCKET[/PREFIX]); stored in the study (default: the stored one, "
                        "else STUDY-artifacts beside a SQLite or journal file; none for a database server)")


def _add_keep_artifacts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--keep-artifacts", choices=KEEP_ARTIFACTS,
                   help="which engines selection leaves in the artifact store: winner (the engine export and verify "
                        "read), finalists (each confirmed finalist's, as timed) or all (also every trial's kept engine "
                        "and earlier selections'); stored in the study (default: the stored choice, else winner; "
                        "tune --keep-engines: all)")


def _add_study_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--study", required=True, help="study name: letters, digits, '.', '_', '-' (required)")
    p.add_argument("--storage", help="storage URL (default sqlite:///studies/NAME.db; journal:///FILE.log; postgresql+psycopg://...)")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="tuner", description="Find the fastest engine of an ONNX model that meets its accuracy requirement.")
    ap.add_argument("--version", action="version", version=f"engine-tuner {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo-model", help="write the built-in demo transformer encoder")
    p.add_argument("--out", default="demo.onnx", help="output path (default demo.onnx)")
    p.add_argument("--outliers", type=int, default=0, help="plant outlier features in this many blocks (default 0)")
    p.set_defaults(run="cmd_demo_model")
    p = sub.add_parser("space", help="print the space a model gets: parameters, defaults, per-layer parameters")
    p.add_argument("model", help="path of the .onnx model")
    p.add_argument("--space", help=SPACE_HELP)
    p.add_argument("--limit", type=_non_negative_int, default=20, help="per-layer parameters to list (default 20)")
    p.set_defaults(run="cmd_space")
    p = sub.add_parser("evaluate", help="build one candidate engine and measure latency and accuracy")
    _add_problem_args(p)
    p.add_argument("--set", action="append", help="parameter value, e.g. precision=int8-dynamic (repeatable; "
                                                  "default: every parameter at its default)")
    p.add_argument("--out", default="tuner-out", help="directory for the engine artifact (default tuner-out)")
    p.set_defaults(run="cmd_evaluate")
    _add_tune_parser(sub)
    _add_winner_parsers(sub)
    p = sub.add_parser("status", help="trials by state, best feasible, winner, Pareto set, disk use")
    _add_study_args(p)
    p.set_defaults(run="cmd_status")
    p = sub.add_parser("studies", help="list the studies of a storage with their disk use (default: studies/*.db and "
                                       "tuner-demo/*.db)")
    p.add_argument("--storage", help="storage URL (default: every studies/*.db and tuner-demo/*.db)")
    p.set_defaults(run="cmd_studies")
    p = sub.add_parser("delete", help="remove a study with its engines, trials log, artifacts and lock files (and its "
                                      "SQLite file where no other study is in it); lists them and asks first")
    _add_study_args(p)
    p.add_argument("--yes", action="store_true", help="delete without asking (default: ask; with no terminal to ask "
                                                      "on, refuse)")
    p.set_defaults(run="cmd_delete")
    p = sub.add_parser("demo", help="write the demo model, tune it, select and export the winner, write the report")
    p.add_argument("--dir", default="tuner-demo", help="where the model, study and winner go (default tuner-demo)")
    p.add_argument("--n-trials", type=_positive_int, default=30, help="trials (default 30, a few minutes on 2 cores)")
    p.add_argument("--quiet", action="store_true", help="no live display: one log line per trial; what the builds print "
                   "(NNCF's and ONNX Runtime's warnings) goes to the study's trials log (default: live on a terminal)")
    p.set_defaults(run="cmd_demo")
    _add_analysis_parsers(sub)
    add_routes_parser(sub)  # provided by the TensorRT backend
    _add_cluster_parsers(sub)
    _add_inspect_parsers(sub)
    _add_backend_commands(sub)
    return ap


# Other distributions add commands (a backend's own tools) through this entry point group:
#   [project.entry-points."engine_tuner.commands"]
#   mytool = "my_package.cli:add_parser"   # add_parser(sub): sub.add_parser("mytool", ...), set_defaults(run="MODULE:FUNC")
# add_parser runs at every start of `tuner`, so its module imports nothing heavy; FUNC's module loads when it runs.
COMMAND_ENTRY_POINTS = "engine_tuner.commands"


def _add_backend_commands(sub) -> None:
    """The commands installed distributions add; one that fails to load is named in one line, the rest work."""
    for ep in entry_points(group=COMMAND_ENTRY_POINTS):
        source = ep.dist.name if ep.dist else ep.value
        if ep.name in sub.choices:  # a built-in command is never taken over
            print(f"tuner: note: {source} adds a command {ep.name!r}, which tuner has already; left out", file=sys.stderr)
            continue
        try:
            ep.load()(sub)
        except Exception as exc:  # noqa: BLE001  another distribution's bug must not stop every command
            print(f"tuner: note: the command {ep.name!r} of {source} did not load ({type(exc).__name__}: {exc})",
                  file=sys.stderr)


def _add_tune_parser(sub) -> None:
    p = sub.add_parser("tune", help="run or resume a study: search for the fastest engine that meets the requirement")
    _add_problem_args(p, model_optional=True)
    _add_study_args(p)
    p.add_argument("--n-trials", type=int,
                   help="trials to run in this call (default: no limit; give it, --timeout or --max-trials)")
    p.add_argument("--max-trials", type=_positive_int, metavar="N",
                   help="study-wide budget, stored in the study: every `tuner worker` stops once N trials finished "
                        "(default: none)")
    p.add_argument("--timeout", type=parse_duration,
                   help="stop starting trials after this long, e.g. 2h, 30m (default: no limit)")
    p.add_argument("--objectives", choices=values(Objectives), help="latency,error (default: a Pareto front) or latency")
    p.add_argument("--throughput", type=_positive_int, nargs="?", const=max(2, os.cpu_count() or 2), metavar="N",
                   help="measure throughput instead of latency: each engine timed with N requests in flight at once "
                        "(default N: this machine's cores), served with its runtime's own parallelism (OpenVINO's "
                        "streams and throughput hint, ONNX Runtime's concurrent runs); stored in the study "
                        "(docs/timing.md#throughput)")
    p.add_argument("--sampler", choices=SAMPLERS,
                   help="tpe (default), nsga2, gp, random, grid, or TensorRT's tuning strategies for any "
                        "backend: fast (the defaults, then one knob changed at a time), full (every "
                        "combination) or mixed (fast, then full over the knobs that helped)")
    p.add_argument("--seed", type=int,
                   help="sampler seed (default: one drawn when the study is created, stored with it: a resumed "
                        "study proposes what it would have proposed without the stop)")
    p.add_argument("--enqueue", action="append",
                   help="a known config to try early, e.g. precision=int8-dynamic,dyn_per_channel=true "
                        "(repeatable; default: only the baseline)")
    p.add_argument("--force", action="store_true", help="accept changed settings (space, requirement, sampler) for an "
                                                        "existing study; a changed model or data needs a new study "
                                                        "(default: refuse any change)")
    p.add_argument("--trial-timeout", type=parse_duration, default=600.0,
                   help="time limit of one trial's build and measurement (default 600 s)")
    p.add_argument("--jobs", type=_positive_int, default=1, metavar="N",
                   help="worker processes on this study (default 1): builds run in parallel, timing one at a time; "
                        "more than the machine's cores is capped to them")
    p.add_argument("--jobs-over-cores", action="store_true",
                   help="run every --jobs worker although they outnumber the cores (default: cap at the core count)")
    p.add_argument("--stop-after-no-improvement", type=_positive_int, metavar="N",
                   help="stop after N trials without a better feasible latency (default: never)")
    p.add_argument("--top-k", type=_positive_int, default=3,
                   help="candidates re-timed side by side to pick the winner (default 3)")
    p.add_argument("--no-select", action="store_true", help="skip the winner selection at the end (default: select)")
    p.add_argument("--max-timing-s", type=_positive_float, help="cap on one candidate's timing, seconds (default 10)")
    p.add_argument("--timing", choices=values(Timing),
                   help="paired: time each candidate alternately with the baseline and rank by the ratio (default on "
                        "CPU backends; stored in the study); alone: time each candidate by itself")
    p.add_argument("--when-busy", choices=WHEN_BUSY, default="warn",
                   help="when other processes keep the machine busy: warn (default: mark the trial) or wait for quiet")
    p.add_argument("--warm-start", metavar="OTHER[@URL]",
                   help="a new study begins with another study's best configs, winner first, re-measured here, and "
                        "reuses its sensitivity ranking when the model and data are the same (default: none)")
    p.add_argument("--sensitivity-budget", type=_non_negative_int, default=150, metavar="BUILDS",
                   help="cap on the builds of the per-layer sensitivity analysis (default 150; 0: no cap): above it, "
                        "layer groups are ranked first, then the layers inside the groups that matter")
    p.add_argument("--sensitivity-method", choices=SENSITIVITY_METHODS, default="activations",
                   help="how layers are ranked: activations (default: one float and one all-quantized run, each layer's "
                        "output compared, then a few builds confirm the float set) or builds (two builds per layer)")
    p.add_argument("--keep-engines", action="store_true",
                   help="keep every trial's engine on disk and in the artifact store, and every selection's "
                        "(--keep-artifacts all; default: each trial's deleted once timed)")
    p.add_argument("--engines-dir", help="where trial engines are built (default next to the study database)")
    _add_artifacts(p)
    _add_keep_artifacts(p)
    p.add_argument("--quiet", action="store_true", help="no live display: one log line per trial; what the builds print "
                   "(NNCF's and ONNX Runtime's warnings) goes to the study's trials log (default: live on a terminal)")
    _add_allow_metric(p)
    p.set_defaults(run="cmd_tune")


def _add_winner_parsers(sub) -> None:
    """select, export, verify: the winner of a study."""
    p = sub.add_parser("select", help="re-time the top feasible trials side by side and store the confirmed winner")
    _add_study_args(p)
    p.add_argument("--top-k", type=_positive_int, default=3, help="candidates to compare (default 3)")
    _add_artifacts(p)
    _add_keep_artifacts(p)
    _add_allow_metric(p)
    p.set_defaults(run="cmd_select")
    p = sub.add_parser("export", help="write the winner: engine, config.json, report.json")
    _add_study_args(p)
    p.add_argument("--out", required=True, help="output folder, new or empty (no default)")
    p.add_argument("--force", action="store_true",
                   help="write into a non-empty --out, replacing only the files an earlier export wrote there "
                        "(listed in its export-manifest.json); other files are kept (default: refuse)")
    p.add_argument("--best-effort", action="store_true",
                   help="with no feasible trial, export the closest candidate (default: refuse)")
    p.add_argument("--rebuild", action="store_true",
                   help="build the engine again from its config (default: download the engine that was timed from "
                        "the study's artifact store, checked against its sha256; rebuilt where there is none)")
    p.add_argument("--artifacts", metavar="DIR_OR_URL",
                   help="where the study's artifacts are, when this host sees them elsewhere (default: the stored one)")
    p.add_argument("--no-verify", action="store_true",
                   help="skip the closing check (tuner verify: the exported engine against the defaults in a fresh "
                        "process; default: verify)")
    _add_allow_metric(p)
    p.set_defaults(run="cmd_export")
    p = sub.add_parser("verify", help="re-time the winner against the backend's defaults in a fresh process, as a user "
                                      "checking the claim would, and print both figures")
    _add_study_args(p)
    p.add_argument("--engine", metavar="DIR", help="the folder `tuner export --out` wrote (default: rebuild the winner)")
    _add_allow_metric(p)
    p.set_defaults(run="cmd_verify")


def _add_analysis_parsers(sub) -> None:
    """sensitivity and report: what a study or a route looks like."""
    p = sub.add_parser("sensitivity", help="rank the per-layer candidates of a quantizing route by the error they cause")
    _add_problem_args(p)
    p.add_argument("--backend", help="the backend whose route is ranked, in a space over several, e.g. openvino "
                                     "(default: the space's only backend)")
    p.add_argument("--route", help="quantizing route (default: the backend's first: int8-dynamic for onnxruntime, "
                                   "int8 for openvino; also int8-static, int4-weight)")
    p.add_argument("--set", action="append",
                   help="route option, e.g. dyn_per_channel=true (repeatable; default: the route's defaults)")
    p.add_argument("--groups", metavar="PATTERN", help="rank groups of nodes by a regex with one capture group, e.g. "
                                                       "'^(block\\d+)/' (default: one candidate per node)")
    p.add_argument("--method", choices=SENSITIVITY_METHODS, default="activations",
                   help="activations (default: one float and one all-quantized run, each layer's output compared) or "
                        "builds (two builds per layer: only it quantized, all but it)")
    p.add_argument("--greedy", action="store_true",
                   help="also run the greedy pass: the smallest float set that meets --require (default: ranking only)")
    p.add_argument("--no-variants", action="store_true",
                   help="rank the route with the space's default options (and --set) as they are; default: first build "
                        "each accuracy-relevant option set of the route all-quantized, print them, and rank the best")
    p.add_argument("--budget", type=_non_negative_int, default=0, metavar="BUILDS",
                   help="cap on the analysis's builds (default 0: no cap): groups first, then layers inside the top groups")
    p.add_argument("--limit", type=_non_negative_int, default=30, help="rows to print (default 30; the files have all)")
    p.add_argument("--out", metavar="PREFIX", help="write PREFIX.csv and PREFIX.json (default sensitivity-MODEL)")
    p.add_argument("--html", action="store_true", help="also write PREFIX.html, a bar chart of the ranking (default: off)")
    p.set_defaults(run="cmd_sensitivity")
    p = sub.add_parser(
        "report", help="write a self-contained HTML report of a study (works offline)",
        description="Write one HTML file (plotly.js inlined, no network needed) with the Pareto front, the "
                    "optimization history, parameter importances, the per-layer override map and a summary table. "
                    "Reads without locking, so it can run while the study is being tuned.")
    _add_study_args(p)
    p.add_argument("--out", default="report.html", help="output HTML file (default report.html)")
    p.set_defaults(run="cmd_report")


def _add_cluster_parsers(sub) -> None:
    p = sub.add_parser("worker", help="join an existing study (any host, one database) and run its trials")
    p.add_argument("--study", required=True, help="study name (required)")
    p.add_argument("--storage", required=True, help="storage URL, e.g. postgresql+psycopg://user:pw@host:5432/db (required)")
    p.add_argument("--n-trials", type=_positive_int, help="at most this many trials from this worker (default: no limit)")
    p.add_argument("--timeout", type=parse_duration, help="stop starting trials after this long, e.g. 2h (default: no limit)")
    p.add_argument("--model",
                   help="the study's model file here, where its stored path differs (same content; default: the stored path)")
    p.add_argument("--data", help="the study's validation .npz here, where its stored path differs (default: the stored path)")
    p.add_argument("--calib-data",
                   help="the study's calibration .npz here, where its stored path differs (default: the stored path)")
    p.add_argument("--space", help="the study's space file here, where its stored path differs (default: the stored path)")
    p.add_argument("--ref-outputs", metavar="FILE.npz",
                   help="the study's reference outputs (tuner tune --ref-outputs) here, where its stored path differs "
                        "(same content; default: the stored path)")
    p.add_argument("--allow-other-machine", action="store_true",
                   help="join although this machine differs from the study's (it gets its own baseline; default: refuse)")
    p.add_argument("--trial-timeout", type=parse_duration, default=600.0, help="time limit of one trial (default 600 s)")
    p.add_argument("--max-timing-s", type=_positive_float, help="cap on one candidate's timing (default: the study's)")
    p.add_argument("--when-busy", choices=WHEN_BUSY, default="warn",
                   help="when other processes keep the machine busy: warn (default: mark the trial) or wait for quiet")
    p.add_argument("--keep-engines", action="store_true",
                   help="keep every trial's engine on this host's disk, in tuner-engines/STUDY-HOST-PID/trial-N, "
                        "where a `tuner select` on this host uploads them to the study's artifact store "
                        "(default: each deleted once timed)")
    p.add_argument("--quiet", action="store_true", help="no live display: one log line per trial; what the builds print "
                   "(NNCF's and ONNX Runtime's warnings) goes to the study's trials log (default: live on a terminal)")
    _add_allow_metric(p)
    p.set_defaults(run="cmd_worker")
    p = sub.add_parser("migrate", help="copy studies between storages, e.g. a SQLite file to PostgreSQL")
    p.add_argument("--from", dest="from_url", required=True, help="source storage URL (required)")
    p.add_argument("--to", dest="to_url", required=True, help="target storage URL (required)")
    p.add_argument("--study", help="only this study (default: all)")
    p.set_defaults(run="cmd_migrate")
    p = sub.add_parser("proxy", help="serve a database to many workers through Optuna's gRPC storage proxy (grpc://HOST:PORT)")
    p.add_argument("--storage", required=True, help="the database, e.g. postgresql+psycopg://user:pw@host:5432/db (required)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this host only; 0.0.0.0 serves workers on other hosts)")
    p.add_argument("--port", type=int, default=13000, help="port to listen on (default 13000; 0: any free port)")
    p.set_defaults(run="cmd_proxy")


def _add_inspect_parsers(sub) -> None:
    """Read-only looks into a study (their work is in commands_inspect.py)."""
    p = sub.add_parser("trials", help="one row per trial: state, speedup, ms, error, feasible, route, backend, float "
                                      "layers, fail reason (read-only; Optuna's trials_dataframe with --csv)")
    _add_study_args(p)
    p.add_argument("--sort", choices=TRIAL_SORTS, default="number",
                   help="row order: number (default), speed (fastest first) or error (smallest first); trials "
                        "without a measurement last")
    p.add_argument("--csv", metavar="FILE",
                   help="also write every column to FILE: Optuna's trials_dataframe columns, then the tuner's "
                        "(default: none)")
    p.set_defaults(run="tuner.cli.commands_inspect:cmd_trials")
    p = sub.add_parser("profile", help="per-node time shares of the winner against the baseline, from the backend's "
                                       "profiler (both built and run again here, in a child process)")
    _add_study_args(p)
    p.add_argument("--trial", type=_non_negative_int, metavar="N",
                   help="profile trial N instead of the winner (default: the winner, else the best feasible trial)")
    p.add_argument("--by", choices=("node", "op"), default="node",
                   help="rows per model node (default) or per op type")
    p.add_argument("--limit", type=_positive_int, default=20,
                   help="rows, by the baseline's time (default 20; the rest is summed in one row)")
    p.set_defaults(run="tuner.cli.commands_inspect:cmd_profile")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(_normalize_argv(sys.argv[1:] if argv is None else argv))
    previous = install_stops()  # Ctrl-C and SIGTERM stop at a safe point, never inside a storage write
    try:
        # "function" in commands.py, or "module:function" (a backend's own command); heavy libraries load here
        module, _, function = args.run.rpartition(":")
        return getattr(importlib.import_module(module or ".commands", __package__), function)(args)
    except UserError as exc:
        print(f"tuner: error: {exc}", file=sys.stderr)
        return 2
    except Terminated:
        print("tuner: terminated (SIGTERM); a trial that was running is failed with that reason: the same "
              "command resumes the study", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("tuner: interrupted", file=sys.stderr)
        return 130
    finally:
        restore_stops(previous)  # main() called in-process (tests, the API) leaves the handlers as they were


if __name__ == "__main__":
    sys.exit(main())
