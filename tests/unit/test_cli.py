"""The command line: one line per user error, a parser that loads nothing heavy, the timing lock."""
import subprocess
import sys

import pytest

from tuner.cli import main


@pytest.mark.parametrize("argv, message", [
    (["tune", "--study", "nope", "--n-trials", "1"], "needs the model"),
    (["tune", "MODEL", "--study", "s"], "give a budget"),
    (["tune", "MODEL", "--study", "s", "--n-trials", "1", "--sampler", "bayes"], "--sampler bayes"),
    (["tune", "MODEL", "--study", "s", "--n-trials", "1", "--objectives", "speed"], "--objectives speed"),
    (["tune", "MODEL", "--study", "s", "--n-trials", "1", "--storage", "redis://x"], "unknown kind"),
    (["status", "--study", "ghost"], "no study 'ghost'"),
])
def test_cli_tune_errors(argv, message, demo_path, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = [demo_path if a == "MODEL" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_report_module_is_light_for_the_cli():
    """Building the CLI parser must not import Optuna or plotly; the figures load on first use."""
    code = ("import sys, tuner.cli as c; c.build_parser(); "
            "heavy = [m for m in ('optuna', 'plotly') if m in sys.modules]; assert not heavy, heavy; "
            "from tuner.report import pareto_figure; assert 'plotly' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
