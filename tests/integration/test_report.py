"""`tuner report` and the figure functions, on real studies of the demo model in real SQLite files.

The expected Pareto front, best-so-far line and override rates are computed here from the stored
trials, so the tests hold whatever the latencies measured on this machine are."""
import html
import json
import os
import re
import sqlite3
import subprocess

import optuna
import pytest
from needs import chromium_or_skip
from optuna.trial import TrialState

from tuner.cli.demo import write_demo_model
from tuner.errors import UserError
from tuner.measure.latency import LatencyProtocol
from tuner.report import (
    StudyView,
    float_layers,
    history_figure,
    importance_figure,
    layer_map_figure,
    layer_override_rates,
    note_of,
    pareto_figure,
    summary_rows,
    write_report,
)
from tuner.run.options import TuneOptions
from tuner.run.tune import tune_study
from tuner.search.trials import is_feasible
from tuner.store.storage import load_study

FAST = LatencyProtocol(warmup=1, min_runs=3, max_runs=8, max_seconds=1)
NOTEBOOK = os.path.join(os.path.dirname(__file__), "..", "..", "notebooks", "analyze_study.ipynb")
LIMIT = 1e-4
# Two routes; per-block overrides (four layer parameters) so the layer map has something to show.
SPACE = """
name: report-test
backend: onnxruntime
parameters:
  precision: {type: categorical, choices: [fp32, int8-dynamic], default: fp32}
  intra_op_num_threads: {type: int, low: 1, high: 2, default: 2}
layer_overrides:
  keep_float:
    when: {precision: [int8-dynamic]}
    op_types: [MatMul]
    granularity: group
    group_pattern: '^(block\\d+)/'
"""
ALL_KEPT = "precision=int8-dynamic," + ",".join(f"keep_float/block{i}=true" for i in range(4))


def _options(tmp, name, **kw):
    base = dict(study=name, model=str(tmp / "demo.onnx"), storage=f"sqlite:///{tmp}/{name}.db", shapes=["x=2x64x256"],
                space=str(tmp / "space.yaml"), require=f"cos<={LIMIT}", seed=0, protocol=FAST, progress=False,
                quiet=True, top_k=2)
    base.update(kw)
    return TuneOptions.of(**base)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    write_demo_model(str(tmp / "demo.onnx"), outliers=2)
    (tmp / "space.yaml").write_text(SPACE)
    return tmp


@pytest.fixture(scope="module")
def study(tmp):
    """Baseline fp32 (feasible), int8 with every block quantized (cos ~5e-4: infeasible), int8 with every
    block kept in float (feasible), two sampled trials; then a failed trial and one left RUNNING."""
    result = tune_study(_options(tmp, "r", n_trials=5, enqueue=["precision=int8-dynamic", ALL_KEPT]))
    s = result.study
    failed = s.ask()
    failed.set_user_attr("fail_reason", "build failed (test)")
    s.tell(failed, state=TrialState.FAIL)
    s.ask()  # left RUNNING, as if another process were still tuning
    return optuna.load_study(study_name="r", storage=f"sqlite:///{tmp}/r.db")


@pytest.fixture(scope="module")
def hopeless(tmp):
    """One trial, and a requirement nothing meets."""
    return tune_study(_options(tmp, "z", require="snr_db<=-400", n_trials=1)).study  # -300 dB is identical


def _front(study):
    """Brute-force constrained Pareto front: feasible COMPLETE trials not dominated in (latency, error)."""
    pts = [(t.values[0], t.user_attrs["metrics"]["cos"], t.number) for t in study.trials if is_feasible(t)]
    return sorted(n for a, b, n in pts if not any(c <= a and d <= b and (c < a or d < b) for c, d, _ in pts))


def _traces(fig, role):
    return [t for t in fig.data if (t.meta or {}).get("role") == role]


def test_pareto_figure_front_requirement_winner(study):
    states = [t.state for t in study.trials]
    assert states.count(TrialState.FAIL) == 1 and states.count(TrialState.RUNNING) == 1
    assert not is_feasible(study.trials[1]) and is_feasible(study.trials[2]) and is_feasible(study.trials[0])
    fig = pareto_figure(study)
    (front,) = _traces(fig, "front")
    assert sorted(c[0] for c in front.customdata) == _front(study)
    assert list(front.x) == sorted(front.x)  # drawn left to right
    (req,) = _traces(fig, "requirement")
    assert list(req.y) == [LIMIT, LIMIT] and req.name == f"requirement cos<={LIMIT:g}"
    winner = study.user_attrs["winner"]
    (w,) = _traces(fig, "winner")
    wt = study.trials[winner["trial"]]
    assert w.customdata[0][0] == winner["trial"] and w.x[0] == wt.values[0]
    assert w.y[0] == max(wt.user_attrs["metrics"]["cos"], fig.layout.meta["floor"] or 0)
    assert w.meta["confirmed_ms"] == winner["confirmed_latency"]["median_ms"]
    (b,) = _traces(fig, "baseline")
    assert b.customdata[0][0] == 0
    plotted = {}
    for tr in _traces(fig, "trials"):
        for (n,) in tr.customdata:
            plotted[n] = (tr.meta["feasible"], tr.meta["route"])
    done = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert plotted == {t.number: (is_feasible(t), t.params["precision"]) for t in done}  # no FAIL, no RUNNING
    assert plotted[1] == (False, "int8-dynamic") and plotted[0] == (True, "fp32")
    assert fig.layout.yaxis.type == "log"  # fp32 at ~1e-14 against int8 at ~1e-4: decades apart
    assert note_of(fig) is None


def test_history_importance_layers_summary(study):
    feasible = sorted((t for t in study.trials if is_feasible(t)), key=lambda t: t.number)
    hist = history_figure(study)
    by_trial = [t for t in _traces(hist, "best") if t.meta["x"] == "trial"][0]
    best, expect = float("inf"), []
    for t in sorted((t for t in study.trials if t.state == TrialState.COMPLETE), key=lambda t: t.number):
        best = min(best, t.values[0]) if is_feasible(t) else best
        expect.append(best)
    assert list(by_trial.y) == expect and by_trial.y[-1] == min(t.values[0] for t in feasible)
    assert len([t for t in _traces(hist, "best") if t.meta["x"] == "minutes"]) == 1

    imp = importance_figure(study)
    assert "PedAnovaImportanceEvaluator" in imp.layout.title.text
    assert {t.meta["target"] for t in imp.data} == {"latency", "error"}, note_of(imp)

    near, rates = layer_override_rates(study)  # the model's layers by name, not the search's parameters
    assert near and all(is_feasible(t) and "keep_float/block0" in t.params for t in near)
    kept = {t.number: set(float_layers(t)) for t in near}
    assert set(rates) == set().union(*kept.values()) and all("/" in n and "keep_float" not in n for n in rates)
    for n, r in rates.items():
        assert r == sum(n in kept[t.number] for t in near) / len(near)
    assert list(rates.values()) == sorted(rates.values(), reverse=True)
    layers = layer_map_figure(study)
    (bars,) = _traces(layers, "layer_rates")
    assert list(bars.x) == [rates[k] for k in reversed(list(rates))] and bars.meta["trials"] == [t.number for t in near]

    rows = dict(summary_rows(study))
    winner = study.user_attrs["winner"]
    assert "complete 5" in rows["trials by state"] and "fail 1" in rows["trials by state"]
    assert "running 1" in rows["trials by state"] and "still being tuned" in rows["note"]
    assert rows["winner"].startswith(f"trial {winner['trial']}, {winner['speedup']:.2f}x the baseline, confirmed side by side")
    assert rows["requirement"] == f"cos<={LIMIT:g}" and "total tuning time" in rows


def _run_cli(argv):
    """The report command as the CLI runs it, with its UserError raised (main prints it as one line)."""
    from tuner.cli import commands
    from tuner.cli.main import build_parser

    args = build_parser().parse_args(argv)
    return getattr(commands, args.run)(args)


def test_cli_report_is_self_contained(study, tmp, capsys):
    out = tmp / "out" / "report.html"
    assert _run_cli(["report", "--study", "r", "--storage", f"sqlite:///{tmp}/r.db", "--out", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    text = out.read_text()
    assert not re.search(r"<script[^>]+src=", text) and "cdn.plot.ly" not in text.split("<body>")[1]
    assert "Plotly.newPlot" in text and text.count("<script type='text/javascript'>") == 1
    for key in ("pareto", "history", "importance", "layers"):
        assert f"id='{key}'" in text
    assert "PedAnovaImportanceEvaluator" in text
    with pytest.raises(UserError, match="no study 'ghost'"):
        _run_cli(["report", "--study", "ghost", "--storage", f"sqlite:///{tmp}/r.db"])
    with pytest.raises(UserError, match="no such file"):
        _run_cli(["report", "--study", "r", "--storage", f"sqlite:///{tmp}/missing.db"])
    assert not (tmp / "missing.db").exists()
    with pytest.raises(UserError, match="is a directory"):
        _run_cli(["report", "--study", "r", "--storage", f"sqlite:///{tmp}/r.db", "--out", str(tmp)])


def test_report_reads_while_a_writer_holds_the_database(study, tmp):
    """Another process mid-transaction (WAL file): the report reads the last committed state."""
    writer = sqlite3.connect(tmp / "r.db", isolation_level=None, timeout=1)
    try:
        writer.execute("BEGIN EXCLUSIVE")
        writer.execute("UPDATE studies SET study_name = study_name")
        path = write_report(load_study("r", f"sqlite:///{tmp}/r.db", reading=True), str(tmp / "during.html"))
        assert "Pareto front of feasible trials" in open(path).read()
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_no_feasible_trial_says_so(hopeless, tmp):
    view = StudyView.of(hopeless)
    assert len(view.trials) == 1 and not view.feasible
    pareto = pareto_figure(hopeless)
    assert note_of(pareto).startswith("No feasible trial") and not _traces(pareto, "front")
    assert not _traces(pareto, "winner")
    hist = history_figure(hopeless)
    assert not hist.data and note_of(hist).startswith("No feasible trial")
    assert not layer_map_figure(hopeless).data and not importance_figure(hopeless).data  # one trial: notes only
    rows = dict(summary_rows(hopeless))
    assert rows["winner"].startswith("none: no trial meets the requirement")
    text = open(write_report(hopeless, str(tmp / "z.html"))).read()
    assert text.count("<p class='note'>No feasible trial") == 3  # Pareto, history, layer map
    assert "Too few completed trials (1)" in text and "id='fig-history'" not in text


def test_notebook_outputs_are_stripped():
    nb = json.load(open(NOTEBOOK))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c["outputs"] == [] and c["execution_count"] is None for c in code)


def test_notebook_runs_top_to_bottom(study, tmp, monkeypatch):
    import nbclient  # the dev extra's: a missing one fails, never skips
    import nbformat

    monkeypatch.setenv("TUNER_STORAGE", f"sqlite:///{tmp}/r.db")
    monkeypatch.setenv("TUNER_STUDY", "r")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum("application/vnd.plotly.v1+json" in o.get("data", {}) for o in outputs) == 4
    text = "".join(o.get("text", "") for o in outputs)
    assert "study r in" in text and "kept in float in" in text and "keep_float/" not in text  # layers by name


CAPTURE = """<script>window.__errors = [];
window.addEventListener('error', function (e) { window.__errors.push(String(e.message)); });
var __ce = console.error; console.error = function () { window.__errors.push([].join.call(arguments, ' ')); \
__ce.apply(console, arguments); };
window.addEventListener('load', function () { setTimeout(function () {
  document.body.setAttribute('data-errors', JSON.stringify(window.__errors));
  document.body.setAttribute('data-plots', String(document.querySelectorAll('.js-plotly-plot .main-svg').length > 0 ? \
document.querySelectorAll('.js-plotly-plot').length : 0));
}, 500); });</script>"""


@pytest.mark.parametrize("name", ["r", "z"])
def test_report_renders_in_headless_chromium(name, study, hopeless, tmp):
    chromium = chromium_or_skip()
    page = tmp / f"{name}-chromium.html"
    text = open(write_report(study if name == "r" else hopeless, str(tmp / f"{name}.html"))).read()
    page.write_text(text.replace("<head>", "<head>" + CAPTURE, 1))  # capture errors before any other script runs
    proc = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           f"--user-data-dir={tmp / 'chromium-profile'}", "--virtual-time-budget=10000",
                           "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = re.search(r'data-errors="([^"]*)"', proc.stdout)
    assert m, "the page did not finish loading: " + proc.stderr[-2000:]
    assert json.loads(m.group(1).replace("&quot;", '"')) == []
    assert "Uncaught" not in proc.stderr
    plots = int(re.search(r'data-plots="(\d+)"', proc.stdout).group(1))
    assert plots == (4 if name == "r" else 1)  # the hopeless study: only the Pareto chart (with its note)




# Markup a stored string could carry (issue 43): run, it would mark the page's body.
OWNED = "document.body.setAttribute('data-owned','1')"
PAYLOAD = f"<img src=x onerror=\"{OWNED}\"><script>{OWNED}</script>"


def _plant_markup(study_db, to_db) -> None:
    """A copy of the study with PAYLOAD in every kind of stored string the report shows: a failed trial's
    reason, its queue label and worker, each completed trial's layer names (config keys) and a config value
    (in the charts' hover text), and the study's model path and notes (in the summary table)."""
    with sqlite3.connect(study_db) as src, sqlite3.connect(to_db) as copy:
        src.backup(copy)
    with sqlite3.connect(to_db) as db:
        ids = dict(db.execute("SELECT number, trial_id FROM trials"))
        states = dict(db.execute("SELECT number, state FROM trials"))
        failed = next(n for n, s in states.items() if s == "FAIL")
        done = [n for n, s in states.items() if s == "COMPLETE"]
        put = "UPDATE trial_user_attributes SET value_json=? WHERE trial_id=? AND key=?"
        db.execute(put, (json.dumps(PAYLOAD), ids[failed], "fail_reason"))
        for key in ("enqueued", "worker"):
            db.execute("INSERT INTO trial_user_attributes (trial_id, key, value_json) VALUES (?, ?, ?)",
                       (ids[failed], key, json.dumps(PAYLOAD)))
        for n in done:
            (config,) = db.execute("SELECT value_json FROM trial_user_attributes WHERE trial_id=? AND key='config'",
                                   (ids[n],)).fetchone()
            config = json.loads(config) | {f"keep_float/{PAYLOAD}": True, "intra_op_num_threads": PAYLOAD}
            db.execute(put, (json.dumps(config), ids[n], "config"))
        (settings,) = db.execute("SELECT value_json FROM study_user_attributes WHERE key='tuner_settings'").fetchone()
        settings = json.loads(settings) | {"model_path": f"/models/{PAYLOAD}.onnx", "notes": [PAYLOAD]}
        db.execute("UPDATE study_user_attributes SET value_json=? WHERE key='tuner_settings'", (json.dumps(settings),))


# Hovers every point of every chart once the page has loaded: a hover label renders the trial's text.
HOVER = """<script>window.addEventListener('load', function () { setTimeout(function () {
  document.querySelectorAll('.js-plotly-plot').forEach(function (gd) {
    (gd.data || []).forEach(function (trace, c) {
      for (var i = 0; i < (trace.x || trace.y || []).length; i++) {
        try { Plotly.Fx.hover(gd, [{curveNumber: c, pointNumber: i}]); } catch (e) {}
      }
    });
  });
  document.body.setAttribute('data-hovered', '1');
}, 100); });</script>"""


def test_markup_in_stored_strings_stays_inert_in_headless_chromium(study, tmp):
    chromium = chromium_or_skip()
    _plant_markup(tmp / "r.db", tmp / "marked.db")
    marked = load_study("r", f"sqlite:///{tmp}/marked.db", reading=True)
    text = open(write_report(marked, str(tmp / "marked.html"))).read()
    assert text.count(html.escape(PAYLOAD)) == 2  # the model path and the note, shown as text
    page = tmp / "marked-chromium.html"
    page.write_text(text.replace("<head>", "<head>" + CAPTURE, 1).replace("</body>", HOVER + "</body>", 1))
    proc = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           f"--user-data-dir={tmp / 'chromium-profile-marked'}", "--virtual-time-budget=10000",
                           "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    body = re.search(r"<body[^>]*>", proc.stdout)
    assert body and "data-errors" in body.group(0), "the page did not finish loading: " + proc.stderr[-2000:]
    assert "data-hovered" in body.group(0) and "data-owned" not in body.group(0)  # no planted script ran
