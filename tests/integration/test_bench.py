"""bench/run.py once with tiny budgets on the demo model: it runs end to end and writes its outputs.
Nothing here reads the timings (issue 6: a benchmark, not a test)."""
import json
import os
import subprocess
import sys

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "run.py")


def test_bench_runs_every_strategy_and_writes_table_json_and_figure(tmp_path):
    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, BENCH, "--models", "demo", "--budget", "2", "--seeds", "0",
                           "--timing-s", "0.2", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((out / "bench.json").read_text())["demo"]
    assert set(res["runs"]) == {"tuner-0", "random-0", "grid-0"}
    assert res["baseline_final_ms"] > 0
    for name, run in res["runs"].items():
        n_trials = 11 if name == "grid-0" else 2  # the grid: baseline + 10 route configs
        assert len(run["curve"]) == n_trials, name
        assert run["final_ms"] > 0 and run["best_ms"] > 0, name  # the baseline is feasible: every run has a winner
        assert 1 <= run["trials_to_3pct"] <= n_trials
        assert run["error"]["cos"] <= 0.005  # the winner meets the requirement
    table = (out / "bench.md").read_text().splitlines()
    assert [row.split("|")[3].strip() for row in table[2:]] == [
        "baseline (ORT defaults)", "tuner (1 run)", "random (1 run)", "grid (1 run)"]
    assert "plotly" in (out / "bench.html").read_text()[:20000].lower()
