"""The study's --timeout bounds its analysis (tuner.analysis.rankings): an evaluator whose deadline has passed
starts no job, and the ranking it was making says so and keeps every layer quantized. A fake clock; nothing built."""
from clocks import FakeClock

from tuner.analysis.quantizing import quantizing_override
from tuner.analysis.rankings import override_ranking
from tuner.execute.jobs import Evaluator
from tuner.inputs.space import SPACES_DIR
from tuner.problem.spec import load_problem


def test_an_analysis_past_the_study_s_deadline_ranks_nothing_and_says_so(demo_path):
    # a shape of its own: no analysis of another test is in the cache to answer without a build
    problem = load_problem(demo_path, f"{SPACES_DIR}/onnxruntime-cpu.yaml", shapes=["x=3x64x256"], require="cos<=0.005",
                           n_batches=1)
    override = quantizing_override(problem, "int8-dynamic")
    clock = FakeClock(100.0)
    with Evaluator(problem.spec, deadline=50.0, clock=clock) as evaluator:
        ranking = override_ranking(problem, override, evaluator)
        assert evaluator._runner._proc is None  # no child started: the deadline is checked before a job
    assert ranking["skipped"] == "the study's --timeout ran out during the analysis; every layer stays quantized"
    assert (ranking["order"], ranking["cut"], ranking["greedy_feasible"]) == ([], 0, False)
    clock.t = 40.0  # before the deadline the same evaluator starts its jobs
    with Evaluator(problem.spec, deadline=50.0, clock=clock) as evaluator:
        assert evaluator.batch()["x"].shape == (3, 64, 256)
