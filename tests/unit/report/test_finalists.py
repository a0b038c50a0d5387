"""The finalists side by side (tuner.report.finalists) as tune and select print them: each one's
timing, the winner and the baseline marked, a tie within noise said only when the CIs overlap."""
import optuna
from memory_studies import stats, winner

from tuner.report.finalists import finalist_lines
from tuner.run.tune import TuneResult, describe_result


def test_tune_and_select_show_the_finalists_and_a_tie_within_noise():
    finalists = [{"trial": 7, "baseline": False, "feasible": True} | stats(3.20, 0.05),
                 {"trial": 12, "baseline": False, "feasible": True} | stats(3.22, 0.05),
                 {"trial": 0, "baseline": True, "feasible": True} | stats(3.60, 0.04),
                 {"trial": 4, "baseline": False, "feasible": False} | stats(2.90, 0.04, 10.0, 96.0)]
    lines = describe_result(TuneResult(optuna.create_study(), winner(finalists, 7), 0))
    text = "\n".join(lines)
    assert "finalists, timed side by side" in text
    row = next(line for line in lines if line.strip().startswith("trial 12"))
    assert "3.220 ms, p10-p90 3.059-3.381, 95% CI [3.170, 3.270]" in row
    assert "(winner)" in next(line for line in lines if line.strip().startswith("trial 7"))
    assert "(baseline)" in next(line for line in lines if line.strip().startswith("trial 0 "))
    failed = next(line for line in lines if line.strip().startswith("trial 4"))
    assert "failed the accuracy re-check" in failed and "unsteady" in failed
    tie = [line for line in lines if line.startswith("tie:")]
    assert len(tie) == 1 and "trial 7 ties trial 12 within noise" in tie[0] and "(the baseline)" not in tie[0]


def test_no_tie_is_claimed_when_the_cis_are_apart():
    finalists = [{"trial": 7, "baseline": False, "feasible": True} | stats(3.00, 0.05),
                 {"trial": 0, "baseline": True, "feasible": True} | stats(3.60, 0.05)]
    lines = finalist_lines(winner(finalists, 7))
    assert len(lines) == 3 and not any(line.startswith("tie") for line in lines)
    finalists[1] = finalists[1] | stats(3.04, 0.05)
    assert "(the baseline)" in finalist_lines(winner(finalists, 7))[-1]


def test_the_winner_line_shows_the_metrics_the_requirement_names_and_no_other():
    finalists = [{"trial": 7, "baseline": False, "feasible": True} | stats(3.00, 0.05)]
    won = winner(finalists, 7) | {"requirement": "rel_l2<=0.01", "confirmed_metrics": {"rel_l2": 0.004, "l2": 3.5}}
    first = describe_result(TuneResult(optuna.create_study(), won, 0))[0]
    assert "rel_l2=0.004" in first and " l2=" not in first  # "l2" is inside "rel_l2<=...", not named by it
