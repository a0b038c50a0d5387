"""`tuner tune` with nothing else said (the default study): sensitivity by default, failing routes
learnt, paired timing, load awareness, verify and warm start. Real builds in child processes, real
SQLite studies."""
import multiprocessing as mp
import os
import time

import optuna
import pytest
from optuna.trial import TrialState

from tuner.analysis import rankings, variants
from tuner.cli.demo import write_demo_model
from tuner.cli.main import main
from tuner.execute.evaluate import build
from tuner.execute.timing import ALONE_PROCESSES, measure
from tuner.inputs.space import SPACES_DIR
from tuner.measure.latency import LatencyProtocol
from tuner.measure.paired import measure_paired
from tuner.problem.spec import config_from_sets, load_problem
from tuner.run.options import TuneOptions
from tuner.run.tune import tune_study
from tuner.search.failures import KNOWN_FAILURE, PREFIX
from tuner.search.trials import is_feasible, is_runtime_defaults

FAST = LatencyProtocol(warmup=1, min_runs=3, max_runs=12, max_seconds=1)
PLANTED = sorted(f"block{b}/attn/{t}_proj" for b in (1, 3) for t in "qkv")


# ONNX Runtime's space as it ships: the default where OpenVINO is not installed (cpu.yaml, the default
# where it is, adds OpenVINO's own ranking: tests/integration/test_tune_across_backends.py)
ORT_SPACE = os.path.join(SPACES_DIR, "onnxruntime-cpu.yaml")


def options(tmp, name, model, **kw):
    base = dict(study=name, model=model, storage=f"sqlite:///{tmp}/{name}.db", shapes=["x=2x64x256"], space=ORT_SPACE,
                require="cos<=0.0005", seed=0, protocol=FAST, progress=False, quiet=True, top_k=2)
    return TuneOptions.of(**(base | kw))


@pytest.fixture(scope="module")
def planted_study(tmp_path_factory):
    """A study of the planted demo with the default space and nothing else said."""
    tmp = tmp_path_factory.mktemp("defaults")
    model = write_demo_model(str(tmp / "planted.onnx"), outliers=2)
    with pytest.MonkeyPatch.context() as mp:  # restored after: the session's other tests keep their own cache
        mp.setenv("TUNER_CACHE", str(tmp / "cache"))
        # The analysis skips the ranking of a route whose variants read clearly slower than fp32 (quick timing):
        # the demo's int8 reads close to its fp32, and a loaded machine tips it. Not what this tests.
        mp.setattr(rankings, "NOT_FASTER", float("inf"))
        # Which variant is "clearly slower" is a quick timing too: with it off the choice is by error alone
        # (deterministic), so the float set is known exactly.
        mp.setattr(variants, "CLEARLY_SLOWER", float("inf"))
        result = tune_study(options(tmp, "a", model, n_trials=4))
    return tmp, model, result


def test_the_default_space_finds_the_planted_float_set(planted_study):
    _, _, result = planted_study
    settings = result.study.user_attrs["tuner_settings"]
    assert settings["encoding"] == {"keep_float": "sensitivity"}  # auto, with 32 candidates
    ranking = settings["rankings"]["keep_float"]
    cut = sorted(ranking["order"][:ranking["cut"]])
    # chosen by error alone (CLEARLY_SLOWER off): the lowest error, the first of equals. Which one that is depends on
    # the CPU's int8 kernels: per-channel weights on AVX-512 VNNI (0.0122 against 0.0129), per-tensor on AVX2 only,
    # where per-channel saturates (0.435)
    errors = [r["error"] for r in ranking["variants"]]
    lowest = errors.index(min(errors))
    assert [r["chosen"] for r in ranking["variants"]] == [i == lowest for i in range(len(errors))], errors
    assert cut == PLANTED
    # one float and one all-quantized run, then a few confirming builds: the variants' 4 and about 10, not 70
    assert ranking["method"] == "activations" and ranking["analysis_builds"] <= 20, ranking["analysis_builds"]
    found = [t for t in result.study.trials if is_feasible(t) and sorted(t.user_attrs["config"].get("keep_float", [])) == cut]
    assert found and found[0].user_attrs["config"]["precision"] == "int8-dynamic"
    # each runtime's defaults first, then the analysis, whose greedy candidate is queued the moment it is found
    trials = result.study.trials
    defaults = [t.number for t in trials if is_runtime_defaults(t)]
    assert defaults == list(range(len(defaults))) and trials[len(defaults)].user_attrs.get("enqueued") == "greedy"


def test_status_counts_the_analysis_builds(planted_study, capsys):
    tmp, _, result = planted_study
    assert main(["status", "--study", "a", "--storage", f"sqlite:///{tmp}/a.db"]) == 0
    out = capsys.readouterr().out
    builds = result.study.user_attrs["tuner_settings"]["rankings"]["keep_float"]["analysis_builds"]
    assert f"work: 4 trials + {builds} analysis builds" in out and "timing paired" in out


def test_warm_start_enqueues_the_other_winner_first_and_reuses_the_ranking(planted_study):
    tmp, model, first = planted_study
    result = tune_study(options(tmp, "b", model, n_trials=2, select=False, warm_start=f"a@sqlite:///{tmp}/a.db"))
    trials = result.study.trials
    winner = first.study.trials[first.winner["trial"]]
    assert trials[0].user_attrs.get("baseline")
    if winner.user_attrs.get("baseline"):  # the other study's winner is its defaults: trial 0 here already
        assert trials[0].params == winner.params
    else:
        assert trials[1].user_attrs["enqueued"] == "warm start 1" and trials[1].params == winner.params
    assert all("reused_from" not in t.user_attrs for t in trials)  # measured again, never copied across studies
    settings = result.study.user_attrs["tuner_settings"]
    assert (settings["warm_start"]["ranking_reused"]
            and settings["rankings"] == first.study.user_attrs["tuner_settings"]["rankings"])


def test_verify_times_each_engine_in_a_process_of_its_own_then_alone(planted_study, capsys):
    tmp, _, _ = planted_study
    assert main(["verify", "--study", "a", "--storage", f"sqlite:///{tmp}/a.db"]) == 0
    out = capsys.readouterr().out
    v = optuna.load_study(study_name="a", storage=f"sqlite:///{tmp}/a.db").user_attrs["winner"]["verify"]
    assert f"verify: winner {v['winner_ms']:.2f} ms, defaults {v['defaults_ms']:.2f} ms" in out
    assert f"{v['speedup']:.2f}x [95% {v['speedup_low']:.2f}-{v['speedup_high']:.2f}]" in out
    assert f"the study claimed {v['claimed_speedup']:.2f}x: verify reads {100 * v['difference']:+.1f}%" in out
    assert v["processes"]["winner"] != v["processes"]["defaults"] and os.getpid() not in v["processes"].values()
    alone = v["alone"]  # each engine alone in fresh processes, none shared, none this one
    pids = alone["winner"]["pids"] + alone["baseline"]["pids"]
    assert len(alone["winner"]["pids"]) == ALONE_PROCESSES and len(set(pids)) == 2 * ALONE_PROCESSES
    assert os.getpid() not in pids and f"verify: deployed alone: {alone['speedup']:.2f}x the baseline" in out


SPACE_WITH_A_BROKEN_ROUTE = """
name: broken
backend: onnxruntime
parameters:
  precision: {type: categorical, choices: [fp32, int4-weight], default: fp32}
  intra_op_num_threads: {type: int, low: 1, high: 2, default: 2}
  int4_block_size: {type: categorical, choices: [7, 128], default: 128, when: {precision: [int4-weight]}}
"""


def test_a_route_that_fails_to_build_is_built_once(tmp_path, demo_path):
    space = tmp_path / "broken.yaml"
    space.write_text(SPACE_WITH_A_BROKEN_ROUTE)
    broken = "precision=int4-weight,int4_block_size=7"
    result = tune_study(options(tmp_path, "f", demo_path, space=str(space), n_trials=4, select=False, require="cos<=0.5",
                          enqueue=[f"{broken},intra_op_num_threads=1", f"{broken},intra_op_num_threads=2",
                                   "precision=int4-weight"]))
    t = result.study.trials
    assert t[1].state == TrialState.FAIL and "block" in t[1].user_attrs["fail_reason"].lower()
    assert t[2].state == TrialState.PRUNED and t[2].user_attrs[KNOWN_FAILURE]["trial"] == 1
    assert "latency" not in t[2].user_attrs and t[2].constraints["builds"] > 0  # not built; infeasible for TPE
    assert t[3].state == TrialState.COMPLETE  # the same route with other options still builds
    learnt = [k for k in result.study.user_attrs if k.startswith(PREFIX)]
    assert len(learnt) == 1


def test_int8_static_on_weights_only_builds_where_the_mask_holds_minus_inf(masked_attention_path, tmp_path):
    problem = load_problem(masked_attention_path, shapes=["x=2x16x32", "mask=2x16"], int_ranges=["mask=0:2"],
                           n_batches=2)
    static = {"precision": "int8-static", "calibration_method": "Entropy"}
    with pytest.raises(ValueError, match="not finite"):
        measure(problem, static | {"quant_op_types": "all"}, str(tmp_path / "all"), FAST)
    rec = measure(problem, static | {"quant_op_types": "weights"}, str(tmp_path / "weights"), FAST)
    assert rec.metrics["cos"] < 0.01


@pytest.mark.timing
def test_paired_timing_of_an_engine_against_itself_reads_one(demo_path, tmp_path):
    """The real engine, the real clock (tests/unit/measure/test_paired.py checks the arithmetic exactly).
    Tolerates: a load that comes and goes may push one or two readings out of their own interval; all
    three missing 1.0 is a bias in the protocol (the order of blocks, the lead-in), not noise."""
    problem = load_problem(demo_path, shapes=["x=2x64x256"], n_batches=1)
    engine, _, _ = build(problem, config_from_sets(problem, []), str(tmp_path))
    call = engine.timed_call(problem.batches[0])
    reads = []
    for _ in range(3):  # a shared machine may push one reading out of its own interval; three will not all miss
        _, _, rel = measure_paired(call, call, LatencyProtocol(warmup=2, max_seconds=3))
        reads.append((rel.ci_low, rel.ratio, rel.ci_high))
        if rel.ci_low <= 1.0 <= rel.ci_high:
            break
    engine.close()
    assert any(lo <= 1.0 <= hi for lo, _, hi in reads), reads


def _burn(stop):
    while not stop.is_set():
        pass


@pytest.mark.timing
def test_a_timing_beside_a_cpu_burner_is_marked_busy(demo_path, tmp_path):
    """psutil's real counters (tests/unit/measure/test_load.py checks the arithmetic exactly). Tolerates
    any other load: it only adds to the burners' cores."""
    problem = load_problem(demo_path, shapes=["x=2x64x256"], n_batches=1)
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    burners = [ctx.Process(target=_burn, args=(stop,)) for _ in range(os.cpu_count() or 1)]
    for b in burners:
        b.start()
    try:
        time.sleep(0.5)
        rec = measure(problem, config_from_sets(problem, []), str(tmp_path), LatencyProtocol(max_seconds=2, min_runs=30))
    finally:
        stop.set()
        for b in burners:
            b.join(10)
    assert rec.load["busy"] and rec.load["other_cores"] > 0.5, rec.load
