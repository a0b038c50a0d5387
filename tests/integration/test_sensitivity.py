"""Sensitivity analysis and the sensitivity encoding, on the demo model with planted outliers
(blocks 1 and 3: their q/k/v projections read four channels 60x larger than the rest)."""
import dataclasses

import pytest

from tuner.analysis import rankings
from tuner.analysis.quantizing import quantizing_override
from tuner.analysis.sensitivity import analyze
from tuner.cli.demo import write_demo_model
from tuner.cli.main import main
from tuner.execute.jobs import Evaluator
from tuner.measure.latency import LatencyProtocol
from tuner.problem.spec import load_problem
from tuner.run.options import TuneOptions
from tuner.run.tune import tune_study
from tuner.search.trials import is_feasible

PLANTED = {f"block{b}/attn/{t}_proj" for b in (1, 3) for t in "qkv"}
# At this bound every 5 of the 6 planted projections in float still fail (cos >= 0.00087 here) and
# all 6 pass (0.00024): the right float set is known.
REQUIRE = "cos<=0.0005"
FAST = LatencyProtocol(warmup=1, min_runs=3, max_runs=8, max_seconds=1)
SPACE = """\
name: planted
backend: onnxruntime
parameters:
  precision: {{type: categorical, choices: [fp32, int8-dynamic], default: fp32}}
  intra_op_num_threads: {{type: int, low: 1, high: 2, default: 2}}
layer_overrides:
  keep_float:
    when: {{precision: [int8-dynamic]}}
    op_types: [MatMul]
    encoding: {encoding}
"""


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    return write_demo_model(str(tmp_path_factory.mktemp("planted") / "planted.onnx"), outliers=2)


def test_ranking_puts_the_planted_blocks_first_and_is_cached(planted):
    problem = load_problem(planted, shapes=["x=2x64x256"], require="cos<=0.002")
    groups = dataclasses.replace(quantizing_override(problem, "int8-dynamic"), granularity="group",
                                 group_pattern=r"^(block\d+)/")
    with Evaluator(problem.spec, persistent=True) as evaluator:
        table = analyze(problem, {"precision": "int8-dynamic"}, groups, evaluator)
    assert not table["cached"]
    assert [e["name"] for e in table["entries"]][:2] in (["block1", "block3"], ["block3", "block1"])
    assert table["error_all_quantized"] > 0.002  # quantizing everything breaks the requirement
    again = analyze(problem, {"precision": "int8-dynamic"}, groups, None)  # cached: no build
    assert again["cached"] and again["entries"] == table["entries"]


def test_a_route_without_per_layer_candidates_says_so(planted, capsys):
    assert main(["sensitivity", planted, "--shape", "x=2x64x256", "--route", "fp16"]) == 2
    err = capsys.readouterr().err
    assert "route fp16 has no per-layer candidates" in err and "int8-dynamic" in err


def _study(tmp_path, planted, encoding, n_trials):
    space = tmp_path / f"{encoding}.yaml"
    space.write_text(SPACE.format(encoding=encoding))
    return tune_study(TuneOptions.of(study=encoding, model=planted, storage=f"sqlite:///{tmp_path}/{encoding}.db",
                            space=str(space), shapes=["x=2x64x256"], require=REQUIRE, seed=0, n_trials=n_trials,
                            protocol=FAST, progress=False, quiet=True, select=False)).study


def _near_planted(t) -> bool:
    kept = set(t.user_attrs["config"].get("keep_float", []))
    return (t.user_attrs["config"]["precision"] == "int8-dynamic" and is_feasible(t)
            and len(kept ^ PLANTED) <= 1)


def test_sensitivity_encoding_finds_the_planted_float_set_where_independent_does_not(tmp_path, planted, monkeypatch):
    # The route gate (a quick timing of int8 against fp32) may skip the ranking on a loaded machine: not what this
    # tests. A CI run under load once read an empty order here.
    monkeypatch.setattr(rankings, "NOT_FASTER", float("inf"))
    sens = _study(tmp_path, planted, "sensitivity", 30)
    settings = sens.user_attrs["tuner_settings"]
    ranking = settings["rankings"]["keep_float"]
    assert settings["encoding"] == {"keep_float": "sensitivity"}
    assert set(ranking["order"][:6]) == PLANTED, {k: ranking.get(k) for k in ("skipped", "dropped", "variants")}
    found = [t for t in sens.trials if t.user_attrs.get("config") and _near_planted(t)]
    assert found, "no feasible int8 trial keeping only the planted projections in float"
    assert any(t.user_attrs.get("enqueued") == "greedy" for t in found)
    indep = _study(tmp_path, planted, "independent", 30)
    assert not [t for t in indep.trials if t.user_attrs.get("config") and _near_planted(t)]


def test_cli_writes_the_ranked_table(planted, tmp_path, capsys):
    prefix = str(tmp_path / "sens")
    assert main(["sensitivity", planted, "--shape", "x=2x64x256", "--require", REQUIRE, "--groups", r"^(block\d+)/",
                 "--greedy", "--html", "--out", prefix]) == 0
    out = capsys.readouterr().out
    assert "greedy float set: ['block1', 'block3']" in out
    rows = open(f"{prefix}.csv").read().splitlines()
    assert rows[0].startswith("rank,candidate") and {rows[1].split(",")[1], rows[2].split(",")[1]} == {"block1", "block3"}
    assert "plotly" in open(f"{prefix}.html").read()
