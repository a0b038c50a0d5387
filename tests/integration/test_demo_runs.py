"""The README's first command, `tuner demo`, run to completion at a small budget: the study, its winner
selected and exported (and verified), the report written, and every path it prints there."""
import json
import os
import re
import subprocess
import sys

import optuna
import pytest
from optuna.trial import TrialState


@pytest.mark.timeout(1800)
def test_tuner_demo_runs_to_the_end_and_everything_it_names_exists(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tuner.cli.main", "demo", "--n-trials", "3", "--quiet", "--dir", "d"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=1700,
                       env=dict(os.environ, TUNER_CACHE=str(tmp_path / "cache")))
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    trials = optuna.load_study(study_name="demo", storage=f"sqlite:///{tmp_path / 'd' / 'demo.db'}").trials
    finished = [t.state for t in trials if t.state != TrialState.WAITING]  # a greedy candidate may wait past the budget
    assert finished == [TrialState.COMPLETE] * 3, finished
    exported = re.search(r"exported the (winner|best-effort candidate) to (\S+)/ ", out)
    report = re.search(r"report: (\S+)  \(", out)
    assert exported and report, out
    winner = tmp_path / exported.group(2)
    assert (winner / "config.json").is_file() and (winner / "report.json").is_file() and (winner / "engine").is_dir()
    assert (tmp_path / report.group(1)).is_file() and "plotly" in (tmp_path / report.group(1)).read_text()
    assert (tmp_path / "d" / "demo.db").is_file() and (tmp_path / "d" / "demo.onnx").is_file()
    meta = json.loads((winner / "report.json").read_text())
    assert meta["meets_requirement"] is True and meta["study"] == "demo"
    # verified: the exported engine re-timed in fresh processes, paired and then each alone
    assert re.search(r"^verify: winner [\d.]+ ms, defaults [\d.]+ ms", out, re.M), out
    assert meta["verify"]["processes"]["winner"] != meta["verify"]["processes"]["defaults"], meta["verify"]
